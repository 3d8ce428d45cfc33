"""The team as it is: no search. The starting workflow runs, and with iterations, runs again
(each a fresh probe, the best kept by public checks then validation beyond the paired noise);
nothing in it is ever changed, so nothing waits for a person. With no iteration it is one run of
the team, what ``run_task`` does, recorded in the studio like any search (``run_task --project``).
With the shared evidence graph it is the fixed-memory control (memory_fixed.py); without, the
plain control: how much do the searches add over running the same team again?"""
from __future__ import annotations

from dataclasses import replace

from ..protocol.panels import Panel, TraceEvent
from .memory_fixed import MemoryFixedSearch
from .probe import Probe


class FixedTeamSearch(MemoryFixedSearch):
    name = "fixed"
    title = "The team as it is (no search)"
    unit = "run"

    @classmethod
    def present(cls, events: list[TraceEvent]) -> list[Panel]:
        return [replace(p, note="the same team each run, nothing changed") if p.kind == "chart" else p
                for p in super().present(events)]

    def __init__(self, ctx):  # noqa: D107 - the memory control's, less its need for shared memory
        super(MemoryFixedSearch, self).__init__(ctx)
        self.first: Probe | None = None
        self.best: Probe | None = None
        self.hib = ctx.task.metric.higher_is_better

    def _run(self, n: int, label: str) -> Probe:
        memory = self.ctx.runner.memory
        if memory is not None and memory.share:
            return super()._run(n, label)
        return self.ctx.runner.run(self.workflow, label, n)
