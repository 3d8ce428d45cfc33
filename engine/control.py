"""Commands a run reads: pause, cancel, or "another attempt holds this run now".

The engine asks its Control at step boundaries (before each model call, between iterations);
the studio implements it on the run's row. Emitting an event never stops a run.
"""
from __future__ import annotations

from typing import Protocol


class Control(Protocol):
    def check(self) -> None:
        """Raise engine.errors.RunInterrupted when the run must stop now; otherwise return."""
        ...


class NoControl:
    """A run nobody steers (the CLI): it never stops early."""

    def check(self) -> None:
        return None
