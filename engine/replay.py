"""The one state fold: a run rebuilt from its events alone, one event at a time.

``RunRecord`` is one execution of a workflow (a probe, or ``python -m engine run``'s one run);
``SearchState`` is a whole run as the studio stores it: the search's own events and every
probe's, in the order they arrived. Each applies one typed event (``apply``); folding a run's
events from the start gives what its page shows on load, its replay at any position, each live
message's state, and the console's progress, so these can never disagree. The state computed
at the end (the runner's result, the search's spend, what the judge scored) is held to the fold
of the events by ``tests/integration/test_state_fold.py``, over every shipped search.

A run folder may hold several attempts of one run (a probe re-run after a resume), each in
its own trace file (engine/trace.py). ``rebuild`` describes ONE attempt: given the events of
several, the latest attempt wins and the others are ignored, so nothing is counted twice.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from .budget import Usage
from .judge_rubric import CRITERIA
from .protocol.events import (AgentFinished, Check, Evaluation, Judgement, ModelCall, ModelCallFailed, Route, RunFailed,
                              RunFinished, RunStarted, SearchFailed, SearchFinished, SearchStarted, SearchStep)
from .trace import Event, latest_trace, read_events
from .workflow import Workflow, WorkflowValidationError

# The one agent-state machine: an agent's engine status as the DAG colours it (the studio's
# pages and messages read it from here, never map statuses themselves).
DAG_STATES = {"WAITING": "waiting", "RUNNING": "running", "SUCCESS": "done", "FAILURE": "failed",
              "STOPPED": "failed", "SKIPPED": "skipped", "RETRY": "waiting", "FALLBACK": "waiting"}


def dag_state(status: str | None) -> str:
    """An agent's engine status (RUNNING, SUCCESS, ...) as the DAG shows it."""
    return DAG_STATES.get(status or "", "done")


@dataclass
class RunRecord:
    run_id: str = ""
    attempt: int = 1
    task: str = ""
    workflow: Workflow | None = None
    workflow_data: dict | None = None   # as the run_started event holds it (drawn even if damaged)
    workflow_hash: str | None = None
    iteration: int = 0
    status: str = "interrupted"  # until a run_finished event says otherwise
    reason: str = ""
    agent_status: dict[str, str] = field(default_factory=dict)
    outputs: dict[str, dict] = field(default_factory=dict)
    usage: Usage = field(default_factory=Usage)
    per_agent_usage: dict[str, Usage] = field(default_factory=dict)
    metric: dict | None = None
    checks: list[dict] = field(default_factory=list)
    executions: int = 0
    last_seq: int = 0
    finished: bool = False

    def apply(self, ev: Event) -> None:
        """One event of this run; a payload its model refuses (a damaged line) is passed over."""
        self.last_seq = ev.seq
        if (p := ev.typed) is None:
            return
        if isinstance(p, RunStarted):
            self.run_id, self.task, self.attempt, self.iteration = ev.run_id, p.task, p.attempt, ev.iteration
            self.workflow_data, self.workflow_hash = p.workflow, p.workflow_hash
            try:
                self.workflow = Workflow.from_dict(p.workflow)
            except WorkflowValidationError:  # a damaged stored workflow is still drawn as it was
                self.workflow = None
            self.agent_status = {a: "WAITING" for a in p.order}
        elif ev.kind == "agent_started":
            self.agent_status[ev.agent] = "RUNNING"
        elif isinstance(p, AgentFinished):
            self.agent_status[ev.agent] = p.status
            self.outputs[ev.agent] = p.outputs
        elif isinstance(p, Route):
            if p.taken:
                for node in self.workflow.between(p.target, ev.agent) if self.workflow else ():
                    self.agent_status[node] = "WAITING"
            else:
                self.agent_status[ev.agent] = "FAILURE"
        elif isinstance(p, ModelCall):
            self.usage.add(p.prompt_tokens, p.completion_tokens, p.cost_usd)
            self.per_agent_usage.setdefault(ev.agent, Usage()).add(p.prompt_tokens, p.completion_tokens, p.cost_usd)
        elif isinstance(p, Check):
            self.checks.append({"agent": ev.agent, **p.to_payload()})
        elif ev.kind == "code_execution":
            self.executions += 1
        elif isinstance(p, Evaluation):
            self.metric = p.model_dump(mode="json", exclude_unset=True, exclude={"predictions_sha256", "evaluator"})
        elif isinstance(p, RunFinished):
            self.finished = True
            self.status, self.reason = p.status, p.reason  # the runner's word, its checks' verdicts included
            if p.status == "stopped":
                self.metric = None
        elif isinstance(p, RunFailed):
            self.finished = True
            self.status, self.reason, self.metric = "failed", p.reason or "the model could not be called", None

    def dag_states(self) -> dict[str, str]:
        """Each agent of the run's workflow as the DAG colours it (waiting until it starts)."""
        states = {a["id"]: "waiting" for a in (self.workflow_data or {}).get("agents", [])}
        return {**states, **{a: dag_state(s) for a, s in self.agent_status.items()}}

    def summary(self) -> dict:
        return {"run_id": self.run_id, "status": self.status, "reason": self.reason,
                "workflow_hash": self.workflow.hash if self.workflow else None,
                "agent_status": dict(self.agent_status), "usage": self.usage.to_dict(), "metric": self.metric}


@dataclass
class ScorePoint:
    """One judged probe on the score charts, with the J of the incumbent it was judged against."""

    iteration: int
    J: float | None
    incumbent_J: float | None
    criteria: dict[str, float | None]
    checks_passed: int
    checks_total: int
    validation: float | None
    tokens: int | None = None     # the search's spend when it was judged
    calls: int | None = None


@dataclass
class SearchState:
    """A run as the studio stores it: the search's events and every probe's, in arrival order."""

    search: str | None = None
    status: str = "running"            # finished, failed (the search's own end)
    reason: str = ""
    probes: dict[str, RunRecord] = field(default_factory=dict)   # by run id: each probe, each attempt
    current: str | None = None         # the run id of the probe started last
    scores: list[ScorePoint] = field(default_factory=list)
    incumbent_J: float | None = None   # the J of the workflow last adopted (a person may adopt a lower one)
    steps: int = 0                     # steps settled (adopted or not)
    adopted: list[str] = field(default_factory=list)             # the workflows adopted, in order
    usage: Usage = field(default_factory=Usage)                  # every model call, the search's and its probes'
    final_hash: str | None = None      # what the search committed to
    last_seq: int = 0

    def apply(self, ev: Event) -> None:
        self.last_seq = ev.seq
        if (p := ev.typed) is None:
            return
        if isinstance(p, RunStarted):
            self.probes[ev.run_id] = RunRecord()
            self.current = ev.run_id
        if ev.run_id in self.probes:
            self.probes[ev.run_id].apply(ev)
        if isinstance(p, ModelCall):
            self.usage.add(p.prompt_tokens, p.completion_tokens, p.cost_usd)
        elif isinstance(p, ModelCallFailed):
            self.usage.failed_calls += 1
        elif isinstance(p, SearchStarted):
            self.search, self.status = p.search, "running"
        elif isinstance(p, Judgement):
            if not self.scores and self.incumbent_J is None:
                self.incumbent_J = p.J  # the first probe is its own incumbent
            self.scores.append(ScorePoint(
                iteration=p.iteration_n, J=p.J, incumbent_J=self.incumbent_J,
                criteria={c: (p.scores or {}).get(c) for c in CRITERIA},
                checks_passed=sum(1 for c in p.checks if c.passed), checks_total=len(p.checks),
                validation=p.validation.value if p.validation and p.validation.ok else None,
                tokens=self.usage.tokens, calls=self.usage.calls))
        elif isinstance(p, SearchStep):
            self.steps += 1
            if p.accepted:
                self.adopted.append(p.workflow_hash)
                if p.J is not None:
                    self.incumbent_J = p.J
        elif isinstance(p, SearchFinished):
            self.status, self.final_hash = "failed" if p.failed else "finished", p.final.workflow_hash
            self.reason = p.failed or p.stopped
        elif isinstance(p, SearchFailed):
            self.status, self.reason = "failed", p.reason

    @property
    def probe(self) -> RunRecord | None:
        """The probe started last: what the DAG shows while the run is going."""
        return self.probes.get(self.current) if self.current else None


def fold(events: Iterable[Event], state: SearchState | None = None) -> SearchState:
    """``state`` (a new one by default) after each of ``events`` in turn."""
    state = state if state is not None else SearchState()
    for ev in events:
        state.apply(ev)
    return state


def latest_attempt(events: Iterable[Event]) -> list[Event]:
    """The events of the latest attempt among ``events``.

    One attempt (one ``run_started``): all of them, in any order. Several: those of the attempt
    whose ``run_started`` has the highest attempt number (the later one on a tie), i.e. those
    with its run id; when two attempts share a run id (one file appended to by both, as traces
    were written before attempts had their own files), those after its ``run_started``."""
    events = list(events)
    starts = [(i, e) for i, e in enumerate(events) if e.kind == "run_started"]
    if len(starts) <= 1:
        return events
    at, start = max(starts, key=lambda s: (_attempt(s[1]), s[0]))
    if sum(1 for _, e in starts if e.run_id == start.run_id) > 1:
        return [e for e in events[at:] if e.run_id == start.run_id]
    return [e for e in events if e.run_id == start.run_id]


def _attempt(start: Event) -> int:
    p = start.typed
    return p.attempt if p is not None else 1


def rebuild(events: Iterable[Event]) -> RunRecord:
    """The run as its events tell it (of the latest attempt, see ``latest_attempt``)."""
    rec = RunRecord()
    for ev in sorted(latest_attempt(events), key=lambda e: e.seq):
        rec.apply(ev)
    return rec


def rebuild_from_file(path: Path) -> RunRecord:
    return rebuild(read_events(path))


def rebuild_run_dir(run_dir: Path) -> RunRecord:
    """The run in ``run_dir`` as its latest attempt's trace tells it."""
    return rebuild_from_file(latest_trace(Path(run_dir)))
