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
from .errors import ModelCallError
from .llm import OFFLINE_MODEL, cost_of, count_text_tokens, count_tokens, get_litellm, provider_of
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


class ModelGateway:
    def __init__(self, budget: Budget, tracer: Tracer, seed: int = 0, model_override: str | None = None,
                 max_output_tokens: int = 2048, cache_dir: Path | None = None, retries: int = 2):
        self.budget = budget
        self.tracer = tracer
        self.seed = seed
        self.model_override = model_override
        self.max_output_tokens = max_output_tokens
        self.cache_dir = Path(cache_dir) if cache_dir else None
        self.retries = retries
        self.model_seconds = 0.0  # time spent waiting on models, for overhead accounting

    def complete(self, agent: str, role: str, messages: list[dict], agent_model: str | None = None,
                 temperature: float = 0.7, purpose: str = "role") -> Completion:
        model = resolve_model(role, agent_model, self.model_override)
        started = time.perf_counter()
        prompt_tokens = count_tokens(model, messages)
        self.budget.ensure_room(prompt_tokens, self.max_output_tokens)
        request = {"model": model, "messages": messages, "temperature": temperature, "seed": self.seed,
                   "max_tokens": self.max_output_tokens}
        key = hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()
        cached = self._cache_get(key)
        reported: tuple[int, int] | None = None
        if cached is not None:
            text, cached_hit = cached, True
        else:
            text, reported = self._call(request, agent, role)
            cached_hit = False
            self._cache_put(key, text)
        if reported:  # trust the provider's own count when it gives one
            prompt_tokens, completion_tokens = reported
        else:
            completion_tokens = count_text_tokens(text)
        cost = 0.0 if cached_hit else cost_of(model, prompt_tokens, completion_tokens)
        duration = time.perf_counter() - started
        self.model_seconds += duration
        self.budget.charge(agent, prompt_tokens, completion_tokens, cost)
        result = Completion(text, model, provider_of(model), prompt_tokens, completion_tokens, cost, duration, cached_hit)
        self.tracer.emit(
            "model_call", agent, role=role, purpose=purpose, model=model, provider=result.provider,
            messages=messages, response=text, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
            cost_usd=cost, duration_s=round(duration, 4), cached=cached_hit, request_key=key,
            budget_used=self.budget.used.to_dict(), budget_remaining=self.budget.remaining(),
        )
        return result

    def _call(self, request: dict, agent: str, role: str) -> tuple[str, tuple[int, int] | None]:
        litellm = get_litellm()
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            try:
                response = litellm.completion(**request, metadata={"trellis_agent": agent, "trellis_role": role})
                text = response.choices[0].message.content
                if not isinstance(text, str) or not text.strip():
                    raise ModelCallError(f"{request['model']} returned an empty answer")
                usage = getattr(response, "usage", None)
                reported = None
                if usage is not None and getattr(usage, "completion_tokens", None):
                    reported = (int(usage.prompt_tokens), int(usage.completion_tokens))
                return text, reported
            except Exception as exc:  # provider errors vary by provider; all are retried the same way
                last = exc
                time.sleep(min(0.5 * 2 ** attempt, 4.0) if not request["model"].startswith("trellis/") else 0)
        raise ModelCallError(f"{request['model']} failed after {self.retries + 1} attempts: {last}") from last

    def _cache_get(self, key: str) -> str | None:
        if not self.cache_dir:
            return None
        p = self.cache_dir / f"{key}.json"
        return json.loads(p.read_text())["response"] if p.exists() else None

    def _cache_put(self, key: str, text: str) -> None:
        if self.cache_dir:
            self.cache_dir.mkdir(parents=True, exist_ok=True)
            (self.cache_dir / f"{key}.json").write_text(json.dumps({"response": text}))
