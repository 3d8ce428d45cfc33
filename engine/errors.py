"""Errors a scientist can read. Each names the thing that is wrong and how."""
from __future__ import annotations


class TrellisError(Exception):
    """Base class for every error the engine raises on purpose."""


class TaskSpecError(TrellisError):
    def __init__(self, file: str, problem: str):
        self.file = file
        self.problem = problem
        super().__init__(f"{file}: {problem}")


class ContractSyntaxError(TrellisError):
    def __init__(self, text: str, position: int, problem: str):
        self.text = text
        self.position = position
        self.problem = problem
        pointer = f"{text}\n{' ' * position}^"
        super().__init__(f"invalid contract type {text!r} at position {position}: {problem}\n{pointer}")


class WorkflowValidationError(TrellisError):
    """Raised with every problem found, not just the first, so one edit can fix them all."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"workflow is invalid ({len(self.problems)} problem(s)):\n{lines}")


class BudgetExhausted(TrellisError):
    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(reason)


class ModelCallError(TrellisError):
    """A bad *answer* (empty, unparseable): the step that asked fails and may be retried or repaired."""


class ModelUnavailable(TrellisError):
    """The model cannot be called at all: unknown model or provider, missing or rejected API key,
    or a provider that kept failing (connection, timeout, 5xx) after retries.

    Not a ModelCallError on purpose: the role, judge and mutator handlers that absorb a bad
    answer must not absorb this one, because every later call would fail the same way and the
    run would "complete" having done nothing. It stops the run with the provider's message."""

    def __init__(self, model: str, provider_message: str, kind: str = "provider_error",
                 agent: str | None = None, role: str | None = None, attempts: int = 1):
        self.model = model
        self.provider_message = provider_message
        self.kind = kind
        self.agent = agent
        self.role = role
        self.attempts = attempts
        tried = f" (after {attempts} attempts)" if attempts > 1 else ""
        super().__init__(f"model {model} is unavailable{tried}: {first_line(provider_message)}")

    def to_dict(self) -> dict:
        """For a trace event's payload (the event itself names the agent)."""
        return {"model": self.model, "error_kind": self.kind, "role": self.role,
                "attempts": self.attempts, "provider_message": self.provider_message, "reason": str(self)}


def first_line(text: str, limit: int = 400) -> str:
    """A provider's message as one console line: its first non-empty line, without litellm's prefix."""
    line = next((ln.strip() for ln in str(text).splitlines() if ln.strip()), "").removeprefix("litellm.")
    head, _, rest = line.partition(": ")
    while rest.startswith(head + ": "):  # litellm repeats the class name: "X: X: message"
        rest = rest[len(head) + 2:]
    line = f"{head}: {rest}" if rest else head
    return line if len(line) <= limit else line[: limit - 1] + "…"


class RunInterrupted(BaseException):
    """A controller (a person pausing or cancelling, or a lost lease) stops a run between steps.

    A BaseException, like KeyboardInterrupt, so that no ``except Exception`` on the way up
    (provider retries, role steps) mistakes it for a failure of the step it lands in."""

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(reason)


class AwaitingDecision(TrellisError):
    """The gate has no decision on a proposal yet. The search has checkpointed it and stops; the
    worker is free; the decision re-enqueues the run, which resumes at that proposal."""

    def __init__(self, n: int, key: str):
        self.n = n
        self.key = key
        super().__init__(f"iteration {n}: proposal {key[:12]} waits for a person's decision")


class ExecutorLost(RunInterrupted):
    """The sandbox itself went away (the Docker daemon stopped answering): every later program
    would fail for a reason that is not its own, so the run stops, paused, with the reason, and
    a person resumes it once the sandbox is back (or on another sandbox)."""

    def __init__(self, why: str):
        super().__init__(f"paused: {why}; start it again, then resume the run (or resume it with the subprocess "
                         "sandbox)")
