"""The fixed-memory control (SciMARS paper's "base + fixed memory"): the starting team runs
again every iteration with the search's shared evidence graph and its memory policy as they
are. Nothing in the harness is ever revised; what changes from one run to the next is only what
the team remembers (every run's records are kept for the next). The final commitment is the
best run by public checks, then validation beyond the paired noise (as SciMARS selects).

It answers "how much of SciMARS + Memory is the memory alone?".
"""
from __future__ import annotations

from ..protocol.checkpoints import MemoryFixedState
from ..protocol.events import SearchStep
from ..protocol.gate import Decision, Proposal
from ..protocol.panels import Card, Group, Line, Panel, TraceEvent, cards, chart
from ..trace import typed_events
from ..workflow import Workflow
from .base import Endpoint, Search, SearchOutcome, fmt
from .probe import Probe
from .scimars import _branch, is_supported


class MemoryFixedSearch(Search):
    name = "memory-fixed"
    title = "Fixed memory (control)"
    State = MemoryFixedState
    asks_gate = False
    presents = ("search_iteration",)

    @classmethod
    def present(cls, events: list[TraceEvent]) -> list[Panel]:
        """Each run of the unchanged team with what it remembered: its validation and the best so far."""
        xs, ys, best, groups = [], [], [], []
        for e, p in typed_events(events):
            if not (isinstance(p, SearchStep) and p.search == cls.name):
                continue
            better = p.accepted
            xs.append(p.n), ys.append(p.validation)
            best.append(p.validation if better else p.reference_validation)
            passed = sum(1 for c in p.checks if c.passed)
            groups.append(Group(f"Run {p.n}", [Card(
                f"validation {fmt(p.validation, '.4g')}, checks {passed}/{len(p.checks)}",
                "new best" if better else "kept the best", "good" if better else "plain", [p.reason or ""])]))
        return [chart("Validation per run", [Line("run", xs, ys, "markers"), Line("best so far", xs, best, "lines", "dot", "hv")],
                      "run", "validation", note="the same team each run; only its memory grows"),
                cards("Runs", reversed(groups), note="latest first")] if xs else []

    def __init__(self, ctx):
        super().__init__(ctx)
        if ctx.runner.memory is None or not ctx.runner.memory.share:
            raise ValueError("the fixed-memory control needs the shared evidence graph (evolve with memory on)")
        self.first: Probe | None = None
        self.best: Probe | None = None
        self.hib = ctx.task.metric.higher_is_better

    @property
    def workflow(self) -> Workflow:
        return self.ctx.initial

    def begin(self) -> None:
        self.first = self.best = self._run(0, "initial")
        self.ctx.say(f"initial    validation {fmt(self.first.validation, '.4g')}  "
                     f"checks {self.first.checks_passed}/{len(self.first.checks)}")

    def _run(self, n: int, label: str) -> Probe:
        probe = self.ctx.runner.run(self.workflow, label, n)
        if probe.result.status != "stopped":
            self.ctx.runner.memory.settle([_branch(probe)], [], n)  # every run's records are kept
        return probe

    def propose(self, n: int, move) -> Workflow:
        return self.workflow  # never revised: that is the control

    def probe(self, n: int, candidate: Workflow) -> Probe:
        self.last = self._run(n, f"run{n}")
        return self.last

    def proposal(self, n: int, candidate) -> Proposal | None:
        return None  # nothing in the harness changes, so there is nothing to approve

    def adopt(self, n: int, candidate, decision: Decision | None) -> None:
        probe, best = self.last, self.best
        better = best is not None and is_supported(probe, best, self.hib)
        if better:
            self.best = probe
        self.ctx.tracer.emit(SearchStep(search=self.name, n=n, accepted=better, validation=probe.validation,
                                             reference_validation=best.validation if best else None,
                                             checks=probe.checks, workflow_hash=probe.workflow.hash,
                                             budget_left=self.ctx.budget.remaining(),
                                             reason="better beyond the paired noise" if better else
                                             "not better than the best run beyond the paired noise"))
        self.ctx.say(f"run {n:>3}    validation {fmt(probe.validation, '.4g')}  checks "
                     f"{probe.checks_passed}/{len(probe.checks)}  {'new best' if better else 'kept the best'}")
        if probe.result.status == "stopped":
            self.stopped = "budget exhausted during a run"

    def finish_iteration(self, n: int) -> str | None:
        return self.stopped if self.stopped.startswith("budget") else None

    def snapshot(self) -> MemoryFixedState:
        return MemoryFixedState(first=self.first.checkpoint() if self.first else None,
                                best=self.best.checkpoint() if self.best else None)

    def restore(self, state: MemoryFixedState) -> None:
        self.first = Probe.from_checkpoint(state.first.model_dump()) if state.first else None
        self.best = Probe.from_checkpoint(state.best.model_dump()) if state.best else None

    def pending_state(self, candidate) -> dict:
        return {}

    def pending_restore(self, state: dict) -> Workflow:
        return self.workflow

    def outcome(self) -> SearchOutcome:
        if self.first is None:
            self.first = self.best = self._run(0, "initial")
        return SearchOutcome(Endpoint.of_probe(self.first), Endpoint.of_probe(self.best or self.first), self.done,
                             self.stopped)
