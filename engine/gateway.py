"""The model gateway: every model call of a run goes through here and through litellm.

It picks the model for each role, refuses calls the budget cannot pay for, counts tokens
and cost per call, per agent and per run, and traces each call with the provider's name.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import time
from dataclasses import dataclass, replace
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Mapping

from .budget import Budget
from .control import Control, NoControl
from .errors import ModelCallError, ModelUnavailable, first_line
from .llm import cost_of, count_text_tokens, count_tokens, get_litellm, is_priced, provider_of
from .models import MIN_ANSWER_TOKENS, OFFLINE_MODEL, Endpoint, ModelOptions, ModelSettings, ModelSettingsError
from .offline.chat import offline_completion, register_with
from .prompt_format import fit_prompt
from .protocol.events import ModelCall, ModelCallFailed
from .trace import Tracer


def resolve_model(role: str, agent_model: str | None = None, override: str | None = None,
                  env: Mapping[str, str] = os.environ) -> str:
    """Model for a role: --model beats TRELLIS_MODEL_<ROLE> beats the agent's own choice
    beats TRELLIS_MODEL beats the offline provider (engine/models.py holds the whole order)."""
    return ModelSettings.of(override).endpoint(role, agent_model, env=env).model


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
    # why the model stopped: "stop", "length" (cut off at max_tokens), "tool_calls", ...
    finish_reason: str = "stop"
    max_tokens: int = 0  # the answer length that was asked for

    @property
    def truncated(self) -> bool:
        return self.finish_reason == "length"


@dataclass(frozen=True)
class _Answer:
    text: str
    calls: tuple[dict, ...]
    reported: tuple[int, int] | None
    finish_reason: str


def _within_room(answer: _Answer, room: int) -> _Answer:
    """The answer as read: no longer than ``room`` tokens could be (MAX_CHARS_PER_TOKEN), else cut
    there and marked cut off (what it is charged is capped where it is counted, in ``complete``)."""
    cap = room * MAX_CHARS_PER_TOKEN
    return answer if len(answer.text) <= cap else replace(answer, text=answer.text[:cap], finish_reason="length")


# An answer longer than this many characters per token of the room it was given came from a
# server that ignored max_tokens (a 5 MB answer overran a run's budget 6x and filled its trace):
# it is cut there, counted as the room, and treated as cut off (re-asked).
MAX_CHARS_PER_TOKEN = 16
RATE_LIMIT_RETRIES = 4        # a rate limit clears with time: a few more tries than other errors
MAX_RETRY_AFTER_S = 120.0     # the longest a provider's Retry-After is obeyed before giving up


class ModelGateway:
    def __init__(self, budget: Budget, tracer: Tracer, seed: int = 0, model_override: str | None = None,
                 cache_dir: Path | None = None, retries: int = 2, timeout_s: float | None = None,
                 control: Control | None = None, models: ModelSettings | None = None, replay_only: bool = False):
        self.budget = budget
        # Asked before every model call: the step boundary where a pause or cancel takes effect.
        self.control = control or NoControl()
        self.tracer = tracer
        self.seed = seed
        # Which model serves each role and how to reach it (engine/models.py); --model alone
        # is the run-wide model name.
        self.models = models if models is not None else ModelSettings.of(model_override)
        self.model_override = self.models.model
        # A cassette: every answer is kept under the exact request's hash and reused; with
        # replay_only a request not in it fails instead of reaching a provider.
        self.cache_dir = Path(cache_dir) if cache_dir else None
        self.replay_only = replay_only
        self.retries = retries
        self.timeout_override = timeout_s
        self.model_seconds = 0.0  # time spent waiting on models, for overhead accounting
        self._unpriced_said: set[str] = set()
        self._endpoints: dict[tuple, Endpoint] = {}

    def endpoint(self, role: str, agent_model: str | None = None, agent_options: ModelOptions | None = None) -> Endpoint:
        """The endpoint of a role (and agent), resolved once per gateway, so once per run: reading
        the TRELLIS_* environment again for every call was a twentieth of a node's time, and a
        run's models are those it started with."""
        key = (role, agent_model, agent_options)
        endpoint = self._endpoints.get(key)
        if endpoint is None:
            endpoint = self.models.endpoint(role, agent_model, agent_options)
            if self.timeout_override is not None:
                endpoint = replace(endpoint, timeout_s=self.timeout_override)
            self._endpoints[key] = endpoint
        return endpoint

    def complete(self, agent: str, role: str, messages: list[dict], agent_model: str | None = None,
                 temperature: float = 0.7, purpose: str = "role", tools: list[dict] | None = None,
                 tool_choice: str | None = None, response_schema: dict | None = None,
                 agent_options: ModelOptions | None = None, answer_tokens: int | None = None) -> Completion:
        """One model call. ``tools`` are function schemas the model may call (litellm's
        ``tools=``; engine/tool_calls.py runs what it asks for); ``tool_choice="none"`` asks
        for an answer without further calls. ``response_schema`` (a JSON schema) is sent as a
        structured-output request where the endpoint takes one (engine/answers.py decides).
        ``answer_tokens`` replaces the endpoint's answer length for this call (a re-ask after
        a cut-off answer), within the context. A prompt that leaves the answer too little of the
        context is cut to fit (prompt_format.fit_prompt), and the trace says by how much."""
        self.control.check()
        endpoint = self.endpoint(role, agent_model, agent_options)
        model = endpoint.model
        started = time.perf_counter()
        prompt_tokens = count_tokens(model, messages)
        room = endpoint.answer_room(prompt_tokens, answer_tokens)
        cut_chars = 0
        if endpoint.context_tokens is not None and room < min(answer_tokens or endpoint.wanted_room(),
                                                              endpoint.wanted_room()):
            # The count is the gateway's estimate (a stand-in tokenizer for most local models):
            # a tenth is kept spare so that the server's own count fits too.
            limit = int((endpoint.context_tokens - endpoint.wanted_room() - 16) * 0.9)
            messages, cut_chars = fit_prompt(messages, lambda m: count_tokens(model, m) > limit)
            prompt_tokens = count_tokens(model, messages)
            room = endpoint.answer_room(prompt_tokens, answer_tokens)
        if room < MIN_ANSWER_TOKENS:
            self.budget.failed(agent)
            raise ModelCallError(
                f"the {role}'s prompt is about {prompt_tokens:,} tokens, which leaves {max(room, 0):,} of the "
                f"{endpoint.context_tokens:,}-token context for the answer; give the model a larger context "
                f"(context_tokens) or a shorter input")
        # the budget reserves the whole answer the call may return, not a guess at it
        self.budget.ensure_room(prompt_tokens, room)
        request = {"model": model, "messages": messages, "temperature": temperature, "seed": self.seed,
                   "max_tokens": room}
        if tools:  # absent otherwise, so that calls without tools keep their cache keys
            request["tools"] = tools
            if tool_choice:
                request["tool_choice"] = tool_choice
        mode = self._structured(endpoint) if response_schema is not None else "off"
        if mode == "json_schema":
            request["response_format"] = {"type": "json_schema", "json_schema": {
                "name": f"{role}_answer", "schema": response_schema, "strict": False}}
        elif mode == "json_object":  # llama.cpp's server: the schema rides inside json_object
            request["response_format"] = {"type": "json_object", "schema": response_schema}
        key = hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()
        cached = self._cache_get(key)
        if cached is not None:
            answer, cached_hit = cached, True
        elif self.replay_only:
            raise ModelUnavailable(model, f"this call is not in the cassette {self.cache_dir} (request {key[:12]}): "
                                   "a replay only answers the calls that were recorded", "not_recorded", agent, role)
        else:
            answer = _within_room(self._call(request, endpoint, agent, role, purpose), room)
            cached_hit = False
            self._cache_put(key, answer)
        prompt_tokens, completion_tokens = answer.reported or (prompt_tokens, count_text_tokens(answer.text))
        completion_tokens = min(completion_tokens, room)  # what the run asked for is all it is charged
        price = (endpoint.price_in or 0.0, endpoint.price_out or 0.0) \
            if endpoint.price_in is not None or endpoint.price_out is not None else None
        priced = price is not None or is_priced(model)
        cost = 0.0 if cached_hit else cost_of(model, prompt_tokens, completion_tokens, price)
        duration = time.perf_counter() - started
        self.model_seconds += duration
        self.budget.charge(agent, prompt_tokens, completion_tokens, cost)
        result = Completion(answer.text, model, provider_of(model), prompt_tokens, completion_tokens, cost, duration,
                            cached_hit, answer.calls, answer.finish_reason, room)
        offered = {"tools": [t["function"]["name"] for t in tools], "tool_calls": list(answer.calls)} if tools else {}
        self.tracer.emit(ModelCall(
            role=role, purpose=purpose, model=model, provider=result.provider,
            messages=messages, response=answer.text, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
            cost_usd=cost, duration_s=round(duration, 4), cached=cached_hit, request_key=key,
            budget_used=self.budget.used.to_dict(), budget_remaining=self.budget.remaining(),
            endpoint=endpoint.describe()["endpoint"], max_tokens=room, finish_reason=answer.finish_reason,
            prompt_chars=sum(len(str(m.get("content") or "")) for m in messages), priced=priced,
            structured="response_format" in request, prompt_cut_chars=cut_chars or None, **offered,
        ), agent)
        return result

    def _structured(self, endpoint: Endpoint) -> str:
        """How a JSON answer is asked of this endpoint: json_schema, json_object or off."""
        if endpoint.offline:
            return "off"
        if endpoint.structured != "auto":
            return endpoint.structured
        try:
            known = bool(_litellm().supports_response_schema(model=endpoint.model))
        except Exception:  # noqa: BLE001 - litellm raises for models it does not know: no structured output
            known = False
        return "json_schema" if known else "off"

    def _call(self, request: dict, endpoint: Endpoint, agent: str, role: str, purpose: str) -> _Answer:
        """One answer from the provider. A bad answer (empty, refused) is retried and then raised
        as ModelCallError, for the step to handle; a provider that cannot serve the model raises
        ModelUnavailable: at once when retrying cannot help (unknown model, rejected key), after
        the retries when it might (connection, timeout, rate limit, 5xx). A rate limit's
        Retry-After is obeyed; every failed try is counted and traced."""
        model = request["model"]
        offline = endpoint.offline
        last: Exception | None = None
        attempt = 0
        while True:
            attempt += 1
            wait = 0.0
            try:
                if offline and request["model"] == OFFLINE_MODEL:
                    # the in-process offline scientist, answered directly: litellm's call path (cost
                    # calculation, logging, response metadata) was most of a node's time, for nothing
                    response = offline_completion(request)  # no litellm for the offline scientist
                else:
                    # The gateway does the retrying, so litellm and the provider SDK must not retry too.
                    response = _litellm().completion(**request, **endpoint.litellm_arguments(), num_retries=0,
                                                  metadata={"trellis_agent": agent, "trellis_role": role})
            except Exception as raw:  # noqa: BLE001 - classified below; nothing is swallowed
                kind = provider_error_kind(raw)
                # What is shown and stored of it: a provider may echo the key ("Incorrect API key
                # provided: sk-..."), so the raw error is never chained, printed or traced.
                exc = ProviderError(endpoint.redact(str(raw)), type(raw).__name__)
                if kind is None:  # this request's own problem (too long, refused content)
                    self._failed(agent, role, purpose, endpoint, attempt, "request_refused", exc, None)
                    raise ModelCallError(_refused(model, exc, endpoint, request)) from None
                retries = RATE_LIMIT_RETRIES if kind == "rate_limit" else self.retries
                if kind in PERMANENT_ERRORS or attempt > retries:
                    self._failed(agent, role, purpose, endpoint, attempt, kind, exc, None)
                    raise ModelUnavailable(model, str(exc), kind, agent, role, attempt) from None
                last = exc
                wait = 0.0 if offline else min(0.5 * 2 ** (attempt - 1), 8.0)
                if kind == "rate_limit":
                    told = retry_after(raw)
                    if told is not None and told > MAX_RETRY_AFTER_S:
                        self._failed(agent, role, purpose, endpoint, attempt, kind, exc, None)
                        raise ModelUnavailable(model, f"rate limited: the provider asks to wait {told:g} s, longer "
                                               f"than Trellis waits ({MAX_RETRY_AFTER_S:g} s): {exc}", kind, agent,
                                               role, attempt) from None
                    wait = max(wait, told or 0.0)
                self._failed(agent, role, purpose, endpoint, attempt, kind, exc, wait)
                self._sleep(wait)
                continue
            choice = response.choices[0]
            message = choice.message
            finish = str(getattr(choice, "finish_reason", None) or "stop")
            text = message.content if isinstance(message.content, str) else ""
            calls = tool_calls_of(message) if request.get("tools") else ()
            usage = getattr(response, "usage", None)
            reported = None
            if usage is not None and getattr(usage, "completion_tokens", None):
                reported = (int(usage.prompt_tokens), int(usage.completion_tokens))
            refusal = getattr(message, "refusal", None)
            if not text.strip() and not calls:
                if finish == "length":  # the whole answer budget went before any text: say so, do not retry
                    return _Answer("", (), reported, finish)
                problem = (f"{model} refused to answer: {str(refusal)[:300]}" if refusal
                           else f"{model} returned an empty answer (finish_reason {finish})")
                last = ModelCallError(problem)
                self._failed(agent, role, purpose, endpoint, attempt, "refusal" if refusal else "empty_answer",
                             last, 0.0 if attempt <= self.retries else None)
                if attempt > self.retries:
                    raise ModelCallError(f"{model} failed after {attempt} attempts: {problem}") from last
                continue
            if text and endpoint.api_key_env:  # a server that echoes its key into the answer
                text = endpoint.redact(text)
            return _Answer(text, calls, reported, finish)

    def _failed(self, agent: str, role: str, purpose: str, endpoint: Endpoint, attempt: int, kind: str,
                exc: BaseException, retry_in: float | None) -> None:
        self.budget.failed(agent)
        self.tracer.emit(ModelCallFailed(
            role=role, purpose=purpose, model=endpoint.model, endpoint=endpoint.describe()["endpoint"],
            attempt=attempt, error_kind=kind, error=first_line(exc, 600), retry_in_s=retry_in,
            failed_calls=self.budget.used.failed_calls), agent)

    def _sleep(self, seconds: float) -> None:
        """Wait before a retry, a second at a time, so that a pause or cancel lands meanwhile."""
        left = seconds
        while left > 0:
            step = min(1.0, left)
            time.sleep(step)
            left -= step
            self.control.check()

    def _cache_get(self, key: str) -> _Answer | None:
        if not self.cache_dir:
            return None
        p = self.cache_dir / f"{key}.json"
        if not p.exists():
            return None
        data = json.loads(p.read_text())
        usage = data.get("usage")
        return _Answer(data["response"], tuple(data.get("tool_calls", ())),
                       (int(usage[0]), int(usage[1])) if usage else None, str(data.get("finish_reason", "stop")))

    def _cache_put(self, key: str, answer: _Answer) -> None:
        if self.cache_dir:
            self.cache_dir.mkdir(parents=True, exist_ok=True)
            entry = {"response": answer.text, **({"tool_calls": list(answer.calls)} if answer.calls else {}),
                     "finish_reason": answer.finish_reason, **({"usage": list(answer.reported)} if answer.reported else {})}
            tmp = self.cache_dir / f".{key}.{os.getpid()}.tmp"
            tmp.write_text(json.dumps(entry))
            tmp.replace(self.cache_dir / f"{key}.json")  # a reader never sees half an entry


def unpriced(models: ModelSettings, roles: Mapping[str, tuple[str | None, ModelOptions | None]]) -> dict[str, str]:
    """role -> model, for each role whose model has no price (neither litellm's nor given)."""
    out = {}
    for role, (agent_model, options) in roles.items():
        e = models.endpoint(role, agent_model, options)
        if e.price_in is None and e.price_out is None and not is_priced(e.model):
            out[role] = e.model
    return out


def refuse_unpriced_cost_budget(models: ModelSettings, budget: Budget,
                                roles: Mapping[str, tuple[str | None, ModelOptions | None]]) -> None:
    """A cost budget over a model with no price would never stop anything (it costs $0):
    refused before the first call, naming the setting that fixes it."""
    if budget.max_cost_usd is None:
        return
    found = unpriced(models, roles)
    if found:
        names = ", ".join(sorted(set(found.values())))
        raise ModelSettingsError(
            f"--max-cost cannot limit {names}: litellm has no price for it, so every call would count "
            f"as $0. Give its price in USD per million tokens (--price IN OUT, or price_in/price_out), or "
            f"limit tokens or calls instead (--max-tokens, --max-calls)")


def endpoint_lines(models: ModelSettings, roles: Mapping[str, tuple[str | None, ModelOptions | None]]) -> list[str]:
    """One console line per endpoint, naming the roles it serves, and a line for any unpriced
    model (a run's first lines; no secrets)."""
    served: dict[str, list[str]] = {}
    for role, (model, options) in roles.items():
        served.setdefault(models.endpoint(role, model, options).line(), []).append(role)
    lines = [f"model      {line} serves {', '.join(r)}" for line, r in served.items()]
    missing = unpriced(models, roles)
    if missing:
        lines.append(f"model      no price known for {', '.join(sorted(set(missing.values())))}: its cost counts "
                     "as $0 (give --price IN OUT to count it)")
    return lines


class ProviderError(Exception):
    """A provider's failure as Trellis shows and stores it: its text with the endpoint's secrets
    taken out, and the name of the exception it was (``kind``)."""

    def __init__(self, text: str, kind: str):
        super().__init__(text)
        self.kind = kind


def _refused(model: str, exc: BaseException, endpoint: Endpoint, request: dict) -> str:
    """The message of a request the provider refused as such: a prompt over the context names
    the numbers and the setting that fixes it."""
    if getattr(exc, "kind", type(exc).__name__) == "ContextWindowExceededError" or \
            "context" in str(exc).lower() and "length" in str(exc).lower():
        size = f" (context_tokens is {endpoint.context_tokens:,})" if endpoint.context_tokens else \
            " (tell Trellis the model's context size with context_tokens, and it fits the answer inside it)"
        return (f"{model} refused the request: the prompt and its {request.get('max_tokens', 0):,}-token answer do "
                f"not fit the model's context{size}: {first_line(exc)}")
    return f"{model} refused the request: {first_line(exc)}"


def retry_after(exc: BaseException) -> float | None:
    """Seconds a rate-limited provider asked to wait (its Retry-After header), or None."""
    headers = None
    for holder in (getattr(exc, "response", None), exc):
        for name in ("headers", "litellm_response_headers"):
            found = getattr(holder, name, None)
            if found:
                headers = found
                break
        if headers:
            break
    if not headers:
        return None
    try:
        value = headers.get("retry-after") or headers.get("Retry-After")
    except AttributeError:
        return None
    if value is None:
        return None
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        try:
            seconds = parsedate_to_datetime(str(value)).timestamp() - time.time()
        except (TypeError, ValueError):
            return None
    return max(0.0, seconds) if math.isfinite(seconds) else None


MAX_TOOL_CALLS = 8  # calls one answer may ask for; more are dropped (engine/tool_calls.py says so)


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


def _litellm():
    """litellm, with the offline scientist registered as its provider ``trellis`` (DESIGN.md)."""
    litellm = get_litellm()
    register_with(litellm)
    return litellm


def provider_error_kind(exc: BaseException) -> str | None:
    """The kind of provider error ``exc`` is, or None when it is the request's own problem
    (a prompt over the context window, content the provider refuses) that another request
    may not have. Anything unrecognised counts as a transient provider error."""
    litellm = _litellm()
    if "missing credentials" in str(exc).lower():  # the OpenAI SDK's missing key surfaces as a "500"
        return "authentication"
    for name, kind in _KINDS:
        cls = getattr(litellm, name, None)
        if isinstance(cls, type) and isinstance(exc, cls):
            return kind
    return "provider_error"

