"""The model gateway: every model call of a run goes through here and through litellm.

It picks the model for each role, refuses calls the budget cannot pay for, counts tokens
and cost per call, per agent and per run, and traces each call with the provider's name.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from .budget import Budget
from .control import Control, NoControl
from .errors import ModelCallError, ModelUnavailable, first_line
from .llm import OFFLINE_MODEL, cost_of, count_text_tokens, count_tokens, get_litellm, provider_of
from .protocol.events import ModelCall
from .trace import Tracer


def resolve_model(role: str, agent_model: str | None = None, override: str | None = None,
                  env: Mapping[str, str] = os.environ) -> str:
    """Model for a role: --model beats TRELLIS_MODEL_<ROLE> beats the agent's own choice
    beats TRELLIS_MODEL beats the offline provider."""
    return (override or env.get(f"TRELLIS_MODEL_{role.upper()}") or agent_model
            or env.get("TRELLIS_MODEL") or OFFLINE_MODEL)


@dataclass(frozen=True)
class Completion:
    text: str
    model: str
    provider: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    duration_s: float
    cached: bool = False
    # the tools the model asked to call instead of (or before) answering: {id, name, arguments}
    tool_calls: tuple[dict, ...] = ()


class ModelGateway:
    def __init__(self, budget: Budget, tracer: Tracer, seed: int = 0, model_override: str | None = None,
                 max_output_tokens: int = 4096, cache_dir: Path | None = None, retries: int = 2,
                 timeout_s: float | None = None, control: Control | None = None):
        self.budget = budget
        # Asked before every model call: the step boundary where a pause or cancel takes effect.
        self.control = control or NoControl()
        self.tracer = tracer
        self.seed = seed
        self.model_override = model_override
        # Room for a whole program or analysis script in one answer (the offline analyzer's
        # script alone is ~3k tokens); every call reserves this much before it is made.
        self.max_output_tokens = max_output_tokens
        self.cache_dir = Path(cache_dir) if cache_dir else None
        self.retries = retries
        # litellm's own default waits 10 minutes on a provider that does not answer.
        self.timeout_s = timeout_s if timeout_s is not None else float(os.environ.get("TRELLIS_MODEL_TIMEOUT_S", 120))
        self.model_seconds = 0.0  # time spent waiting on models, for overhead accounting

    def complete(self, agent: str, role: str, messages: list[dict], agent_model: str | None = None,
                 temperature: float = 0.7, purpose: str = "role", tools: list[dict] | None = None,
                 tool_choice: str | None = None) -> Completion:
        """One model call. ``tools`` are function schemas the model may call (litellm's
        ``tools=``; engine/tools/calls.py runs what it asks for); ``tool_choice="none"`` asks
        for an answer without further calls."""
        self.control.check()
        model = resolve_model(role, agent_model, self.model_override)
        started = time.perf_counter()
        prompt_tokens = count_tokens(model, messages)
        self.budget.ensure_room(prompt_tokens, self.max_output_tokens)
        request = {"model": model, "messages": messages, "temperature": temperature, "seed": self.seed,
                   "max_tokens": self.max_output_tokens}
        if tools:  # absent otherwise, so that calls without tools keep their cache keys
            request["tools"] = tools
            if tool_choice:
                request["tool_choice"] = tool_choice
        key = hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()
        cached = self._cache_get(key)
        reported: tuple[int, int] | None = None
        calls: tuple[dict, ...] = ()
        if cached is not None:
            (text, calls), cached_hit = cached, True
        else:
            text, calls, reported = self._call(request, agent, role)
            cached_hit = False
            self._cache_put(key, text, calls)
        if reported:  # trust the provider's own count when it gives one
            prompt_tokens, completion_tokens = reported
        else:
            completion_tokens = count_text_tokens(text)
        cost = 0.0 if cached_hit else cost_of(model, prompt_tokens, completion_tokens)
        duration = time.perf_counter() - started
        self.model_seconds += duration
        self.budget.charge(agent, prompt_tokens, completion_tokens, cost)
        result = Completion(text, model, provider_of(model), prompt_tokens, completion_tokens, cost, duration, cached_hit,
                            calls)
        offered = {"tools": [t["function"]["name"] for t in tools], "tool_calls": list(calls)} if tools else {}
        self.tracer.emit(ModelCall(
            role=role, purpose=purpose, model=model, provider=result.provider,
            messages=messages, response=text, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
            cost_usd=cost, duration_s=round(duration, 4), cached=cached_hit, request_key=key,
            budget_used=self.budget.used.to_dict(), budget_remaining=self.budget.remaining(), **offered,
        ), agent)
        return result

    def _call(self, request: dict, agent: str, role: str) -> tuple[str, tuple[dict, ...], tuple[int, int] | None]:
        """One answer from the provider. A bad answer (empty) is retried and then raised as
        ModelCallError, for the step to handle; a provider that cannot serve the model raises
        ModelUnavailable: at once when retrying cannot help (unknown model, rejected key), after
        the retries when it might (connection, timeout, rate limit, 5xx)."""
        litellm = get_litellm()
        model = request["model"]
        offline = model.startswith("trellis/")
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            try:
                # The gateway does the retrying, so litellm and the provider SDK must not retry too.
                response = litellm.completion(**request, metadata={"trellis_agent": agent, "trellis_role": role},
                                              timeout=self.timeout_s, num_retries=0)
            except Exception as exc:  # noqa: BLE001 - classified below; nothing is swallowed
                kind = provider_error_kind(exc)
                if kind is None:  # this request's own problem (too long, refused content)
                    raise ModelCallError(f"{model} refused the request: {first_line(exc)}") from exc
                if kind in PERMANENT_ERRORS:
                    raise ModelUnavailable(model, str(exc), kind, agent, role, attempt + 1) from exc
                last = exc
                if attempt < self.retries and not offline:
                    time.sleep(min(0.5 * 2 ** attempt, 4.0))
                continue
            message = response.choices[0].message
            text = message.content if isinstance(message.content, str) else ""
            calls = tool_calls_of(message) if request.get("tools") else ()
            if not text.strip() and not calls:
                last = ModelCallError(f"{model} returned an empty answer")
                continue
            usage = getattr(response, "usage", None)
            reported = None
            if usage is not None and getattr(usage, "completion_tokens", None):
                reported = (int(usage.prompt_tokens), int(usage.completion_tokens))
            return text, calls, reported
        if isinstance(last, ModelCallError):
            raise ModelCallError(f"{model} failed after {self.retries + 1} attempts: {last}") from last
        raise ModelUnavailable(model, str(last), provider_error_kind(last) or "provider_error", agent, role,
                               self.retries + 1) from last

    def _cache_get(self, key: str) -> tuple[str, tuple[dict, ...]] | None:
        if not self.cache_dir:
            return None
        p = self.cache_dir / f"{key}.json"
        if not p.exists():
            return None
        data = json.loads(p.read_text())
        return data["response"], tuple(data.get("tool_calls", ()))

    def _cache_put(self, key: str, text: str, calls: tuple[dict, ...] = ()) -> None:
        if self.cache_dir:
            self.cache_dir.mkdir(parents=True, exist_ok=True)
            entry = {"response": text, **({"tool_calls": list(calls)} if calls else {})}
            (self.cache_dir / f"{key}.json").write_text(json.dumps(entry))


MAX_TOOL_CALLS = 8  # calls one answer may ask for; more are dropped (engine/tools/calls.py says so)


def tool_calls_of(message) -> tuple[dict, ...]:
    """The tool calls of a litellm message as {id, name, arguments}; arguments that are not a
    JSON object are kept as {"_unparsed": text}, for the call to be refused with the reason."""
    out = []
    for i, call in enumerate(getattr(message, "tool_calls", None) or []):
        function = getattr(call, "function", None)
        name = str(getattr(function, "name", "") or "")[:200]
        raw = getattr(function, "arguments", "") or "{}"
        try:
            arguments = json.loads(raw) if isinstance(raw, str) else dict(raw)
        except (ValueError, TypeError):
            arguments = None
        if not isinstance(arguments, dict):
            arguments = {"_unparsed": str(raw)[:2000]}
        out.append({"id": str(getattr(call, "id", "") or f"call_{i}")[:100], "name": name, "arguments": arguments})
    return tuple(out)


# What a litellm exception says about the provider. Permanent kinds fail the run at once.
PERMANENT_ERRORS = frozenset({"authentication", "permission_denied", "not_found", "bad_request"})
_KINDS = (  # most specific first: litellm's classes subclass each other (and openai's)
    ("ContextWindowExceededError", None), ("ContentPolicyViolationError", None),
    ("AuthenticationError", "authentication"), ("PermissionDeniedError", "permission_denied"),
    ("NotFoundError", "not_found"), ("BadRequestError", "bad_request"),
    ("UnprocessableEntityError", "bad_request"), ("RateLimitError", "rate_limit"), ("Timeout", "timeout"),
    ("APIConnectionError", "connection"), ("ServiceUnavailableError", "server_error"),
    ("BadGatewayError", "server_error"), ("InternalServerError", "server_error"),
)


def provider_error_kind(exc: BaseException) -> str | None:
    """The kind of provider error ``exc`` is, or None when it is the request's own problem
    (a prompt over the context window, content the provider refuses) that another request
    may not have. Anything unrecognised counts as a transient provider error."""
    litellm = get_litellm()
    if "missing credentials" in str(exc).lower():  # the OpenAI SDK's missing key surfaces as a "500"
        return "authentication"
    for name, kind in _KINDS:
        cls = getattr(litellm, name, None)
        if isinstance(cls, type) and isinstance(exc, cls):
            return kind
    return "provider_error"

