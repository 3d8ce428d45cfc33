"""Rebuild a run from its events alone: what replay, resume and the studio's pages use.

A run folder may hold several attempts of one run (a probe re-run after a resume), each in
its own trace file (engine/trace.py). ``rebuild`` describes ONE attempt: given the events of
several, the latest attempt wins and the others are ignored, so nothing is counted twice.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from .budget import Usage
from .trace import Event, latest_trace, read_events
from .workflow import Workflow


@dataclass
class RunRecord:
    run_id: str = ""
    attempt: int = 1
    task: str = ""
    workflow: Workflow | None = None
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

    def summary(self) -> dict:
        return {"run_id": self.run_id, "status": self.status, "reason": self.reason,
                "workflow_hash": self.workflow.hash if self.workflow else None,
                "agent_status": dict(self.agent_status), "usage": self.usage.to_dict(), "metric": self.metric}


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
    at, start = max(starts, key=lambda s: (int(s[1].payload.get("attempt", 1)), s[0]))
    if sum(1 for _, e in starts if e.run_id == start.run_id) > 1:
        return [e for e in events[at:] if e.run_id == start.run_id]
    return [e for e in events if e.run_id == start.run_id]


def rebuild(events: Iterable[Event]) -> RunRecord:
    """The run as its events tell it (of the latest attempt, see ``latest_attempt``)."""
    rec = RunRecord()
    stopped_reason = None
    failed_reason = None
    for ev in sorted(latest_attempt(events), key=lambda e: e.seq):
        rec.last_seq = ev.seq
        p = ev.payload
        if ev.kind == "run_started":
            rec.run_id, rec.task = ev.run_id, p.get("task", "")
            rec.attempt = int(p.get("attempt", 1))
            rec.workflow = Workflow.from_dict(p["workflow"])
            rec.agent_status = {a: "WAITING" for a in p.get("order", [])}
        elif ev.kind == "agent_started":
            rec.agent_status[ev.agent] = "RUNNING"
        elif ev.kind == "agent_finished":
            rec.agent_status[ev.agent] = p["status"]
            rec.outputs[ev.agent] = p.get("outputs", {})
        elif ev.kind == "route":
            if p.get("taken"):
                for node in rec.workflow.between(p["target"], ev.agent) if rec.workflow else ():
                    rec.agent_status[node] = "WAITING"
            else:
                rec.agent_status[ev.agent] = "FAILURE"
        elif ev.kind == "model_call":
            rec.usage.add(p["prompt_tokens"], p["completion_tokens"], p["cost_usd"])
            rec.per_agent_usage.setdefault(ev.agent, Usage()).add(p["prompt_tokens"], p["completion_tokens"], p["cost_usd"])
        elif ev.kind == "check":
            rec.checks.append({"agent": ev.agent, **p})
        elif ev.kind == "code_execution":
            rec.executions += 1
        elif ev.kind == "budget_exhausted":
            stopped_reason = p["reason"]
        elif ev.kind == "evaluation":
            rec.metric = {k: v for k, v in p.items() if k not in {"predictions_sha256", "evaluator"}}
        elif ev.kind == "run_finished":
            rec.finished = True
        elif ev.kind == "run_failed":
            rec.finished, failed_reason = True, p.get("reason", "the model could not be called")
    if failed_reason is not None:
        rec.status, rec.reason, rec.metric = "failed", failed_reason, None
    elif rec.finished:
        _settle(rec, stopped_reason)
    return rec


def rebuild_from_file(path: Path) -> RunRecord:
    return rebuild(read_events(path))


def rebuild_run_dir(run_dir: Path) -> RunRecord:
    """The run in ``run_dir`` as its latest attempt's trace tells it."""
    return rebuild_from_file(latest_trace(Path(run_dir)))


def _settle(rec: RunRecord, stopped_reason: str | None) -> None:
    """The run's final status, by the same rules the runner applies."""
    if stopped_reason is not None:
        rec.status, rec.reason, rec.metric = "stopped", stopped_reason, None
        return
    failed = [a for a, s in rec.agent_status.items() if s in {"FAILURE", "SKIPPED"}]
    rec.status = "completed"
    rec.reason = f"agents did not finish: {', '.join(failed)}" if failed else ""
    if rec.metric is None or not rec.metric.get("ok"):
        rec.status = "failed"
        rec.reason = rec.reason or (rec.metric or {}).get("error", "no predictions were produced")
