"""Mimosa local search: one incumbent; each iteration one mutation, probed and judged;
accept iff J(W') > J(W); stop at the iteration budget or J > 0.9.

The rule is what the automatic gate applies; a gate with a person behind it has the final
word (a scientist may keep a change the judge disliked, or veto one it liked), and a person's
own edit of the workflow is adopted between iterations."""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from ..errors import BudgetExhausted, ModelCallError, WorkflowValidationError
from ..gateway import ModelGateway
from ..mutations import Mutation, MutationError, diff
from ..prompts import extract_json
from ..trace import Tracer
from ..workflow import Workflow
from .probe import AutoGate, Gate, Probe, ProbeRunner

MUTATOR_PROCEDURE = (
    "Propose exactly one change to the team's workflow that addresses the judge's weakest criterion: "
    "refine an agent's prompt, refine a role procedure, add or remove an agent, rewire an edge, change a "
    "contract or route, or change the memory policy. Ground it in the data report and the feedback; do not "
    "repeat a change the history shows was already tried."
)
MUTATOR_FORMAT = ('Reply with one ```json block: {"kind": ..., "target": ..., "params": {...}, "rationale": ...}; '
                  "kinds: prompt_refinement, procedure_refinement, agent_addition, agent_removal, edge_rewiring, "
                  "contract_change, route_change, memory_policy_change.")


def accepts(j_new: float | None, j_old: float | None) -> bool:
    """Mimosa's rule: strictly better, and a failed judgement never wins."""
    return j_new is not None and (j_old is None or j_new > j_old)


@dataclass
class IterationRecord:
    n: int
    mutation: dict | None
    valid: bool
    problems: list[str] = field(default_factory=list)
    probe: dict | None = None
    J: float | None = None
    incumbent_J: float | None = None
    accepted: bool = False
    decided_by: str = ""
    budget_left: dict = field(default_factory=dict)
    diff: dict | None = None
    probe_run: Probe | None = field(default=None, repr=False)


@dataclass
class SearchOutcome:
    initial: Probe
    final: Probe
    iterations: list[IterationRecord]
    stopped: str  # why the search ended


def mimosa_search(initial: Workflow, runner: ProbeRunner, gateway: ModelGateway, tracer: Tracer,
                  iterations: int = 5, stop_j: float = 0.9, gate: Gate | None = None,
                  on_iteration=None, resume: dict | None = None, on_checkpoint=None) -> SearchOutcome:
    """Run the search. ``on_checkpoint(state)`` is called after the initial probe and after every
    iteration with a JSON-able state; passing that state back as ``resume`` continues the search
    after its last finished iteration (a killed worker loses at most the iteration in flight)."""
    gate = gate or AutoGate()
    if resume:
        first = Probe.from_checkpoint(resume["first"])
        incumbent = Probe.from_checkpoint(resume["incumbent"])
        history = list(resume.get("history", []))
        done = int(resume["n"])
        runner.count = int(resume.get("probes", runner.count))
        runner.budget.restore(**resume["budget"])
    else:
        tracer.iteration = 0
        incumbent = runner.run(initial, "initial", 0, judge_with=gateway)
        first, history, done = incumbent, [], 0
        _emit_judgement(tracer, incumbent, 0)

    def checkpoint(n: int) -> None:
        if on_checkpoint:
            on_checkpoint({"n": n, "first": first.checkpoint(), "incumbent": incumbent.checkpoint(),
                           "incumbent_workflow": incumbent.workflow.to_dict(), "history": history,
                           "probes": runner.count, "budget": runner.budget.usage_state()})

    if not resume:
        checkpoint(0)
    records: list[IterationRecord] = []
    stopped = "iteration budget reached"
    for n in range(done + 1, iterations + 1):
        if incumbent.judgement and incumbent.judgement.ok and incumbent.judgement.J > stop_j:
            stopped = f"J = {incumbent.judgement.J:.3f} > {stop_j}"
            break
        tracer.iteration = n
        try:
            edit = gate.human_edit(incumbent.workflow)
            record = _human_iteration(n, incumbent, edit, runner, gateway, tracer, history) if edit \
                else _iteration(n, incumbent, runner, gateway, tracer, history, gate)
        except BudgetExhausted as exc:
            stopped = f"budget exhausted: {exc.reason}"
            break
        records.append(record)
        if record.accepted:
            incumbent = record.probe_run
        checkpoint(n)
        if on_iteration:
            on_iteration(record)
        if record.probe and record.probe["status"] == "stopped":
            stopped = "budget exhausted during a probe"
            break
    else:
        if incumbent.judgement and incumbent.judgement.ok and incumbent.judgement.J > stop_j:
            stopped = f"J = {incumbent.judgement.J:.3f} > {stop_j}"
    return SearchOutcome(first, incumbent, records, stopped)


def _human_iteration(n: int, incumbent: Probe, edit: tuple[Workflow, str], runner: ProbeRunner,
                     gateway: ModelGateway, tracer: Tracer, history: list[str]) -> IterationRecord:
    """A version a person wrote replaces the incumbent: it is probed and judged like any
    candidate so its evidence is on record, and adopted because a person made it."""
    workflow, author = edit
    j_old = incumbent.judgement.J if incumbent.judgement else None
    mutation = {"kind": "human_edit", "target": workflow.name, "params": {}, "rationale": workflow.note,
                "author": author}
    change = diff(incumbent.workflow, workflow)
    tracer.emit("mutation_proposed", author, valid=True, mutation=mutation, diff=change,
                parent_hash=incumbent.workflow.hash, child_hash=workflow.hash)
    probe = runner.run(workflow, f"iter{n}-edit", n, judge_with=gateway)
    _emit_judgement(tracer, probe, n)
    j_new = probe.judgement.J if probe.judgement else None
    history.append(f"a person edited the workflow ({workflow.note}) -> J {_fmt(j_new)} vs {_fmt(j_old)}: adopted")
    tracer.emit("search_iteration", None, search="mimosa", n=n, mutation=mutation, J=j_new, incumbent_J=j_old,
                accepted=True, decided_by=author, reason="edited by a person", checks=probe.checks,
                budget_left=runner.budget.remaining(), workflow_hash=workflow.hash, workflow=workflow.to_dict())
    return IterationRecord(n, mutation, True, probe=probe.summary(), J=j_new, incumbent_J=j_old, accepted=True,
                           decided_by=author, budget_left=runner.budget.remaining(), diff=change, probe_run=probe)


def _iteration(n: int, incumbent: Probe, runner: ProbeRunner, gateway: ModelGateway, tracer: Tracer,
               history: list[str], gate: Gate) -> IterationRecord:
    j_old = incumbent.judgement.J if incumbent.judgement else None
    try:
        text = gateway.complete("mutator", "mutator", _mutator_messages(runner, incumbent, history),
                                temperature=0.8, purpose="mutation").text
    except ModelCallError as exc:
        return IterationRecord(n, None, False, [f"mutator failed: {exc}"], incumbent_J=j_old,
                               budget_left=runner.budget.remaining())
    try:
        mutation = Mutation.from_dict(extract_json(text))
        mutation = Mutation(mutation.kind, mutation.target, mutation.params, mutation.rationale, author="mutator")
        child = mutation.apply(incumbent.workflow)
    except (MutationError, WorkflowValidationError, ValueError) as exc:
        problems = getattr(exc, "problems", None) or [str(exc)]
        history.append(f"invalid proposal: {text[:300]}")
        tracer.emit("mutation_proposed", "mutator", valid=False, problems=problems, raw=text[:2000])
        return IterationRecord(n, None, False, problems, incumbent_J=j_old, budget_left=runner.budget.remaining())
    change = diff(incumbent.workflow, child)
    tracer.emit("mutation_proposed", "mutator", valid=True, mutation=mutation.to_dict(), diff=change,
                parent_hash=incumbent.workflow.hash, child_hash=child.hash)
    probe = runner.run(child, f"iter{n}", n, judge_with=gateway)
    _emit_judgement(tracer, probe, n)
    j_new = probe.judgement.J if probe.judgement else None
    rule = accepts(j_new, j_old)
    approved, by, reason = gate.decide({"n": n, "mutation": mutation.to_dict(), "diff": change, "rule_accepts": rule,
                                        "J": j_new, "incumbent_J": j_old, "checks": probe.checks,
                                        "judgement": probe.judgement.to_dict() if probe.judgement else None,
                                        "validation": probe.result.metric, "parent_hash": incumbent.workflow.hash,
                                        "workflow": child.to_dict(), "probe_run_id": probe.result.run_id})
    accepted = approved
    proposal = {k: v for k, v in mutation.to_dict().items() if k != "author"}
    history.append(f"{json.dumps(proposal, sort_keys=True)} -> J {_fmt(j_new)} vs {_fmt(j_old)}: "
                   f"{'accepted' if accepted else 'rejected'}")
    record = IterationRecord(n, mutation.to_dict(), True, probe=probe.summary(), J=j_new, incumbent_J=j_old,
                             accepted=accepted, decided_by=by, budget_left=runner.budget.remaining(), diff=change,
                             probe_run=probe)
    tracer.emit("search_iteration", None, search="mimosa", n=n, mutation=mutation.to_dict(), J=j_new,
                incumbent_J=j_old, accepted=accepted, decided_by=by, reason=reason,
                checks=probe.checks, budget_left=runner.budget.remaining(), workflow_hash=child.hash,
                workflow=child.to_dict() if accepted else None)
    return record


def _emit_judgement(tracer: Tracer, probe: Probe, n: int) -> None:
    j = probe.judgement
    tracer.emit("judgement", "judge", iteration_n=n, workflow_hash=probe.workflow.hash,
                **(j.to_dict() if j else {"ok": False, "error": "not judged (run stopped)"}),
                checks=probe.checks, validation=probe.result.metric)


def _fmt(x: float | None) -> str:
    return "failed" if x is None else f"{x:.3f}"


def _mutator_messages(runner: ProbeRunner, incumbent: Probe, history: list[str]) -> list[dict]:
    j = incumbent.judgement
    feedback = "\n".join(f"- {c}: {j.scores.get(c)} — {j.feedback.get(c)}" for c in j.scores) if j and j.ok \
        else f"(no judgement: {j.error if j else 'not judged'})"
    system = "\n".join(["You are the mutator of a Trellis research team working on the task below.", "",
                        "## Procedure", MUTATOR_PROCEDURE, "", "## Answer format", MUTATOR_FORMAT])
    user = "\n".join([runner.task.description(), "", "## Input: workflow", "```json",
                      json.dumps(incumbent.workflow.to_dict(), indent=1), "```", "",
                      "## Input: judge_feedback", feedback, "", "## Input: report", incumbent.report()[:3000], "",
                      "## Input: history", "\n".join(history) or "(nothing tried yet)"])
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]
