"""A probe: run one workflow candidate in isolation and gather what selection needs.

Probes use in-loop validation scoring only; the official evaluator is out of their reach.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Iterable, Iterator

from ..budget import Budget
from ..control import Control, NoControl
from ..evidence.memory import SharedMemory
from ..gateway import ModelGateway
from ..judge import Judgement, judge_execution, public_checks
from ..models import ModelSettings, settings
from ..runner import RunConfig, RunResult, default_executor, run_workflow
from ..sandbox import Executor
from ..task import Task
from ..tools.host import ToolHost
from ..trace import Event, EventSink, ListSink, Tracer, latest_trace, read_events, typed_events
from ..training.jobs import training_executor
from ..workflow import Workflow

JUDGEMENT_FILE = "judgement.json"


@dataclass
class Probe:
    workflow: Workflow
    result: RunResult
    events: list[Event]
    checks: list[dict]
    judgement: Judgement | None = None
    run_dir: Path | None = None

    @property
    def checks_passed(self) -> int:
        return sum(1 for c in self.checks if c["passed"])

    @property
    def all_checks_pass(self) -> bool:
        return bool(self.checks) and all(c["passed"] for c in self.checks)

    @property
    def validation(self) -> float | None:
        m = self.result.metric or {}
        return m.get("value") if m.get("ok") else None

    def _outputs(self) -> Iterator[dict]:
        """What each agent handed on (its ``agent_finished`` outputs), in run order; an event of
        an older trace that does not read as one is passed over."""
        for _, p in typed_events(self.events, "agent_finished"):
            yield p.outputs

    def report(self) -> str:
        """The analyzer's data report from this execution, for editors and mutators."""
        for outputs in self._outputs():
            if "report" in outputs:
                return str(outputs["report"])
        return ""

    def approach(self) -> str:
        """The plan's title and ``strategy:`` line this execution ran (the last plan handed on),
        for mutators: what the incumbent already does is no change to ask for."""
        plan = ""
        for outputs in self._outputs():
            if "plan" in outputs:
                plan = str(outputs["plan"])
        lines = [ln.strip() for ln in plan.splitlines()
                 if ln.strip().startswith("# ") or ln.strip().lower().startswith("strategy:")]
        return "\n".join(lines[:2])

    def checkpoint(self) -> dict:
        """What a resumed search needs to rebuild this probe: its folder, which attempt's trace
        is this probe's, and its judgement."""
        return {"run_dir": str(self.run_dir), "trace": Path(self.result.trace_path).name,
                "judgement": self.judgement.to_dict() if self.judgement else None}

    @classmethod
    def from_checkpoint(cls, state: dict) -> "Probe":
        """Rebuild a finished probe from its folder (workflow.json, its trace, summary.json).
        Checkpoints from before attempts had their own files name no trace: the latest is used."""
        run_dir = Path(state["run_dir"])
        workflow = Workflow.from_dict(json.loads((run_dir / "workflow.json").read_text()))
        saved = json.loads((run_dir / "summary.json").read_text())
        result = RunResult(**{f.name: saved[f.name] for f in fields(RunResult) if f.name in saved})
        events = list(read_events(run_dir / state["trace"] if state.get("trace") else latest_trace(run_dir)))
        judgement = Judgement.from_dict(state["judgement"]) if state.get("judgement") else None
        return cls(workflow, result, events, public_checks(events), judgement, run_dir)

    def summary(self) -> dict:
        return {"workflow_hash": self.workflow.hash, "version": self.workflow.version, "status": self.result.status,
                "validation": self.result.metric, "checks": self.checks,
                "J": self.judgement.J if self.judgement else None,
                "judgement_ok": self.judgement.ok if self.judgement else None,
                "usage": self.result.usage, "run_id": self.result.run_id}


@dataclass
class ProbeRunner:
    task: Task
    budget: Budget
    root: Path
    seed: int = 0
    executor: Executor | None = None
    sinks: Iterable[EventSink] = field(default_factory=tuple)
    model_override: str | None = None
    models: ModelSettings | None = None
    cache_dir: Path | None = None   # a cassette every probe's calls are recorded in (and replayed from)
    replay_only: bool = False
    control: Control = field(default_factory=NoControl)
    count: int = 0
    memory: SharedMemory | None = None  # a search's shared evidence graph; None: each probe its own
    tools: ToolHost | None = None  # the search's MCP servers (engine/tools/), shared by every probe

    def __post_init__(self) -> None:
        # One sandbox executor for every probe (and the tree's programs), under the search's folder.
        if self.executor is None:
            self.executor = default_executor(Path(self.root).parent / "sandboxes")
        # training programs are jobs of the search (one folder each under <search>/training), so
        # the same program run again by another probe or the hindsight resumes, not restarts
        self.executor = training_executor(self.executor, Path(self.root).parent)

    def run(self, workflow: Workflow, label: str, iteration: int, judge_with: ModelGateway | None = None,
            under: Path | None = None) -> Probe:
        """One execution of ``workflow``, in a folder of its own under ``under`` (default: the
        search's probes/, which the hindsight ranks)."""
        self.count += 1
        sink = ListSink()
        run_dir = Path(under or self.root) / f"{self.count:03d}-{label}"
        result = run_workflow(self.task, workflow, RunConfig(
            run_dir=run_dir, seed=self.seed, budget=self.budget, scoring="validation", iteration=iteration,
            model_override=self.model_override, models=self.models, cache_dir=self.cache_dir, replay_only=self.replay_only, run_id=f"{run_dir.name}", control=self.control,
            memory=self.memory.scope(run_dir.name) if self.memory is not None else None, tools=self.tools),
            executor=self.executor,
            sinks=[sink, *self.sinks])
        probe = Probe(workflow, result, sink.events, public_checks(sink.events), run_dir=run_dir)
        if judge_with is not None and result.status != "stopped":
            probe.judgement = judge_execution(self.task, sink.events, judge_with)
            # Kept beside the probe for the hindsight after the final commitment (engine/hindsight.py)
            (run_dir / JUDGEMENT_FILE).write_text(json.dumps(probe.judgement.to_dict()))
        return probe


def search_gateway(budget: Budget, tracer: Tracer, seed: int, model_override: str | None = None,
                   control: Control | None = None, models: ModelSettings | None = None,
                   cache_dir: Path | None = None, replay_only: bool = False) -> ModelGateway:
    return ModelGateway(budget, tracer, seed=seed, models=settings(models, model_override), control=control,
                        cache_dir=cache_dir, replay_only=replay_only)
