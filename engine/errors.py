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
    pass


class RunInterrupted(BaseException):
    """A controller (a person pausing or cancelling, or a lost lease) stops a run between steps.

    A BaseException, like KeyboardInterrupt, so that no ``except Exception`` on the way up
    (provider retries, role steps) mistakes it for a failure of the step it lands in."""

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(reason)
