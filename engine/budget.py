"""One budget per run: every model call draws from it, whoever makes it."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

from .errors import BudgetExhausted
from .limits import MAX_CALLS, MAX_COST_USD, MAX_TOKENS, LimitError, number_problem


# A search may probe several candidates at once (threads, engine/search/base.py): charges are
# added under this lock, so none is lost. A call checked while others are in flight may still
# take the run past its limit by those calls (at most one per thread).
_LOCK = threading.RLock()


@dataclass
class Usage:
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    # Calls the provider did not answer usefully (an error, a timeout, an empty answer): not
    # charged against the call budget, but counted, so a run that struggled says so.
    failed_calls: int = 0

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def add(self, prompt_tokens: int, completion_tokens: int, cost_usd: float) -> None:
        self.calls += 1
        self.prompt_tokens += prompt_tokens
        self.completion_tokens += completion_tokens
        self.cost_usd += cost_usd

    def to_dict(self) -> dict:
        return {"calls": self.calls, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens, "tokens": self.tokens,
                "cost_usd": round(self.cost_usd, 6), "failed_calls": self.failed_calls}


@dataclass
class Budget:
    max_tokens: int | None = None
    max_cost_usd: float | None = None
    max_calls: int | None = None
    used: Usage = field(default_factory=Usage)
    per_agent: dict[str, Usage] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Checked here, so the CLI, the studio and a resumed run all refuse the same budgets
        # (a 2**40-token budget is no budget at all).
        problems = [p for p in (
            self.max_tokens is not None and number_problem("max_tokens", self.max_tokens, 1, MAX_TOKENS),
            self.max_calls is not None and number_problem("max_calls", self.max_calls, 1, MAX_CALLS),
            self.max_cost_usd is not None and number_problem("max_cost_usd", self.max_cost_usd, 0.0001,
                                                             MAX_COST_USD, integer=False),
        ) if p]
        if problems:
            raise LimitError("budget: " + "; ".join(problems))

    def ensure_room(self, estimated_prompt_tokens: int, reserved_completion_tokens: int) -> None:
        """Refuse a call that would take the run past any limit, before it is made."""
        with _LOCK:
            self._ensure_room(estimated_prompt_tokens, reserved_completion_tokens)

    def _ensure_room(self, estimated_prompt_tokens: int, reserved_completion_tokens: int) -> None:
        if self.max_calls is not None and self.used.calls + 1 > self.max_calls:
            raise BudgetExhausted(f"call budget exhausted: {self.used.calls} of {self.max_calls} model calls used")
        if self.max_tokens is not None:
            needed = self.used.tokens + estimated_prompt_tokens + reserved_completion_tokens
            if needed > self.max_tokens:
                raise BudgetExhausted(
                    f"token budget exhausted: {self.used.tokens} of {self.max_tokens} tokens used and the next "
                    f"call needs about {estimated_prompt_tokens + reserved_completion_tokens}")
        if self.max_cost_usd is not None and self.used.cost_usd >= self.max_cost_usd:
            raise BudgetExhausted(f"cost budget exhausted: ${self.used.cost_usd:.4f} of ${self.max_cost_usd:.4f} spent")

    def charge(self, agent: str, prompt_tokens: int, completion_tokens: int, cost_usd: float) -> None:
        with _LOCK:
            self.used.add(prompt_tokens, completion_tokens, cost_usd)
            self.per_agent.setdefault(agent, Usage()).add(prompt_tokens, completion_tokens, cost_usd)

    def failed(self, agent: str) -> None:
        """Count a call that got no usable answer."""
        with _LOCK:
            self.used.failed_calls += 1
            self.per_agent.setdefault(agent, Usage()).failed_calls += 1

    def remaining(self) -> dict:
        return {
            "tokens": None if self.max_tokens is None else self.max_tokens - self.used.tokens,
            "calls": None if self.max_calls is None else self.max_calls - self.used.calls,
            "cost_usd": None if self.max_cost_usd is None else round(self.max_cost_usd - self.used.cost_usd, 6),
        }

    def restore(self, used: dict, per_agent: dict | None = None) -> None:
        """Carry over what an interrupted run had already spent (resume draws from the same budget)."""
        def usage(d: dict) -> Usage:
            return Usage(int(d.get("calls", 0)), int(d.get("prompt_tokens", 0)),
                         int(d.get("completion_tokens", 0)), float(d.get("cost_usd", 0.0)),
                         int(d.get("failed_calls", 0)))
        self.used = usage(used)
        self.per_agent = {k: usage(v) for k, v in (per_agent or {}).items()}

    def usage_state(self) -> dict:
        return {"used": self.used.to_dict(), "per_agent": {k: v.to_dict() for k, v in self.per_agent.items()}}

    def limits(self) -> dict:
        return {"max_tokens": self.max_tokens, "max_cost_usd": self.max_cost_usd, "max_calls": self.max_calls}
