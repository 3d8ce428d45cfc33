"""Mimosa local search: one incumbent; each iteration one mutation, probed and judged;
accept iff J(W') > J(W); stop at the iteration budget or J > 0.9 (not before one change is tried
when the task's test is shifted from its training rows).

The rule is what the automatic gate applies; a gate with a person behind it has the final
word (a scientist may keep a change the judge disliked, or veto one it liked), and a person's
own edit of the workflow is adopted between iterations."""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from ..console import shorten
from ..errors import ModelCallError
from ..mutations import Mutation, diff
from ..prompt_format import build_messages, fenced_json
from ..protocol.checkpoints import MimosaState
from ..protocol.events import Judgement, McpToolResult, MutationProposed, SearchStep
from ..protocol.gate import Change, Check, Decision, Evidence, Proposal
from ..protocol.panels import Card, Group, Line, Panel, TraceEvent, cards, change_line, chart, decided
from ..selection import Gain, paired_gain
from ..tools.registry import MCP_PREFIX
from ..trace import typed_events
from ..workflow import Workflow
from .base import Endpoint, HumanEdit, Search, SearchOutcome, ask_mutation, edit_change, fmt
from .probe import Probe, ProbeRunner

MUTATOR_PROCEDURE = (
    "Propose exactly one change to the team's workflow that addresses the judge's weakest criterion: "
    "refine an agent's prompt, refine a role procedure, add or remove an agent, rewire an edge, change a "
    "contract or route, change the memory policy, or give an agent a tool or take one away. Ground it in the "
    "data report, the feedback, the failed public checks and how the agents' tools served them; do not repeat "
    "a change the history shows was already tried. Begin the rationale with the criterion you address and "
    "its score."
)
MUTATOR_FORMAT = ('Reply with one ```json block: {"kind": ..., "target": ..., "params": {...}, "rationale": ...}; '
                  "kinds: prompt_refinement, procedure_refinement, agent_addition, agent_removal, edge_rewiring, "
                  "contract_change, route_change, memory_policy_change, tool_allocation "
                  '(params {"add": <tool>} or {"remove": <tool>}, target the agent).')
STOP_J = 0.9
# validation splits that hold rows apart from the fitting rows, as a shifted test is held apart
SHIFTED_SPLITS = frozenset({"holdout_range", "time", "series", "group"})


def accepts(j_new: float | None, j_old: float | None) -> bool:
    """Mimosa's rule: strictly better, and a failed judgement never wins."""
    return j_new is not None and (j_old is None or j_new > j_old)


def accept_rule(j_new: float | None, j_old: float | None, gain: Gain | None) -> tuple[bool, str]:
    """Mimosa's rule with noise-aware selection: J strictly better and, where both candidates
    were validated on the same folds, a validation gain beyond the paired noise (selection.py).
    (Whether it accepts, and why, in words.)"""
    if not accepts(j_new, j_old):
        return False, "J did not improve"
    if gain is None:
        return True, "J improved"
    if not gain.significant:
        return False, f"J improved but the {gain.describe()}: {gain.verdict()}"
    return True, f"J improved and the {gain.describe()}"


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
    reason: str = ""  # why it was accepted or rejected (the rule's words, or a person's)


@dataclass
class Candidate:
    """One iteration's mutation: the child workflow and, once probed, its evidence."""

    mutation: Mutation
    child: Workflow
    change: dict
    probe: Probe | None = None


class MimosaSearch(Search):
    name = "mimosa"
    title = "Mimosa local search"
    State = MimosaState
    adopts_edits = True
    judges = True
    model_roles = ("judge", "mutator")
    presents = ("judgement", "mutation_proposed", "search_iteration")

    @classmethod
    def present(cls, events: list[TraceEvent]) -> list[Panel]:
        """J per iteration: each candidate's and the incumbent's after the iteration's decision;
        and each iteration's change, its J against the incumbent's, and who decided."""
        read = list(typed_events(events))
        initial = next((p.J for _, p in read if isinstance(p, Judgement) and p.iteration_n == 0), None)
        xs, candidate, incumbent, level = [0], [initial], [initial], initial
        groups: list[Group] = []
        for e, p in read:
            if isinstance(p, MutationProposed) and not p.valid:
                who = "a person's edit" if e.agent.startswith("user:") else "the mutator's answer"
                groups.append(Group(f"Iteration {e.iteration}", [Card(
                    f"{who} was refused", "not a valid change", "bad", [f"{x}" for x in (p.problems or [])[:3]])]))
            elif isinstance(p, SearchStep) and p.search == cls.name:
                accepted = p.accepted
                if accepted:
                    level = p.J
                xs.append(p.n), candidate.append(p.J), incumbent.append(level)
                mutation = p.mutation
                groups.append(Group(f"Iteration {p.n}", [Card(
                    change_line(mutation.model_dump() if mutation else None),
                    "adopted" if accepted else "rejected", "good" if accepted else "bad",
                    [line for line in (
                        mutation.rationale if mutation and mutation.kind != "human_edit" else "",
                        f"J {fmt(p.J, '.3f')} against the incumbent's {fmt(p.incumbent_J, '.3f')}",
                        f"decided by {decided(p.decided_by)}" + (f": {p.reason}" if p.reason else ""),
                    ) if line])]))
        if initial is None and len(xs) == 1:
            return []
        return [chart("J per iteration", [Line("candidate J", xs, candidate, "markers"),
                                          Line("incumbent J", xs, incumbent, "lines", "dot", "hv")],
                      "iteration", "J", note="the incumbent's J after each iteration's decision"),
                cards("Iterations", reversed(groups), note="latest first")]

    def __init__(self, ctx, stop_j: float = STOP_J):
        super().__init__(ctx)
        self.stop_j = stop_j
        self.first: Probe | None = None
        self.incumbent: Probe | None = None
        self.history: list[str] = []

    @property
    def runner(self) -> ProbeRunner:
        return self.ctx.runner

    def _j(self, probe: Probe | None) -> float | None:
        return probe.judgement.J if probe is not None and probe.judgement else None

    # --- state ---------------------------------------------------------------------------------
    def begin(self) -> None:
        self.incumbent = self.first = self.runner.run(self.ctx.initial, "initial", 0, judge_with=self.ctx.gateway)
        emit_judgement(self.ctx.tracer, self.incumbent, 0)

    def snapshot(self) -> MimosaState:
        return MimosaState(first=self.first.checkpoint(), incumbent=self.incumbent.checkpoint(),
                           incumbent_workflow=self.incumbent.workflow.to_dict(), history=self.history)

    def restore(self, state: MimosaState) -> None:
        self.first = Probe.from_checkpoint(state.first.model_dump())
        self.incumbent = Probe.from_checkpoint(state.incumbent.model_dump())
        self.history = list(state.history)

    def current_workflow(self) -> Workflow:
        return self.incumbent.workflow

    def stop_reason(self) -> str | None:
        j = self.incumbent.judgement if self.incumbent else None
        if j and j.ok and j.J > self.stop_j:
            if not self.history and self._test_is_shifted():
                return None  # J says least where the test lies apart from the training rows: try one change
            return f"J = {j.J:.3f} > {self.stop_j}"
        return None

    def _test_is_shifted(self) -> bool:
        """The task's validation draws its rows apart from the fitting rows (beyond a range, later
        in time, other groups), as its test is drawn apart from training: a judge's J on the first
        workflow saturates there long before the held-out score does (issue 39)."""
        plan = (self.incumbent.result.metric or {}).get("validation") or {}
        return plan.get("split") in SHIFTED_SPLITS

    # --- one iteration -------------------------------------------------------------------------
    def adopt_edit(self, n: int, edit: HumanEdit) -> bool:
        """A version a person wrote replaces the incumbent: it is probed and judged like any
        candidate so its evidence is on record, and adopted because a person made it."""
        tracer, workflow = self.ctx.tracer, edit.workflow
        j_old = self._j(self.incumbent)
        mutation = edit_change(edit)
        change = diff(self.incumbent.workflow, workflow)
        tracer.emit(MutationProposed(valid=True, mutation=mutation, diff=change,
                                     parent_hash=self.incumbent.workflow.hash, child_hash=workflow.hash), edit.author)
        probe = self.runner.run(workflow, f"iter{n}-edit", n, judge_with=self.ctx.gateway)
        emit_judgement(tracer, probe, n)
        j_new = self._j(probe)
        self.history.append(f"a person edited the workflow ({workflow.note}) -> J {fmt(j_new)} vs {fmt(j_old)}: adopted")
        left = self.ctx.budget.remaining()
        tracer.emit(SearchStep(search="mimosa", n=n, mutation=mutation, J=j_new, incumbent_J=j_old,
                                    accepted=True, decided_by=edit.author, reason="edited by a person",
                                    checks=probe.checks, budget_left=left, workflow_hash=workflow.hash,
                                    workflow=workflow.to_dict()))
        self._record(IterationRecord(n, mutation, True, probe=probe.summary(), J=j_new, incumbent_J=j_old,
                                     accepted=True, decided_by=edit.author, budget_left=left, diff=change,
                                     probe_run=probe))
        self.incumbent = probe
        return True

    def propose(self, n: int, move) -> Candidate | None:
        tracer, j_old = self.ctx.tracer, self._j(self.incumbent)
        try:
            text, proposed, problems = ask_mutation(
                self.ctx.gateway, "mutator", mutator_messages(self.runner, self.incumbent, self.history),
                self.incumbent.workflow)
        except ModelCallError as exc:
            self._record(IterationRecord(n, None, False, [f"mutator failed: {exc}"], incumbent_J=j_old,
                                         budget_left=self.ctx.budget.remaining()))
            return None
        if proposed is not None:
            mutation, child = proposed
        else:
            self.history.append(f"invalid proposal: {text[:300]}")
            tracer.emit(MutationProposed(valid=False, problems=problems, raw=text[:2000]), "mutator")
            self._record(IterationRecord(n, None, False, problems, incumbent_J=j_old,
                                         budget_left=self.ctx.budget.remaining()))
            return None
        change = diff(self.incumbent.workflow, child)
        tracer.emit(MutationProposed(valid=True, mutation=mutation.to_dict(), diff=change,
                                     parent_hash=self.incumbent.workflow.hash, child_hash=child.hash), "mutator")
        return Candidate(mutation, child, change)

    def probe(self, n: int, candidate: Candidate) -> None:
        candidate.probe = self.runner.run(candidate.child, f"iter{n}", n, judge_with=self.ctx.gateway)
        emit_judgement(self.ctx.tracer, candidate.probe, n)

    def proposal(self, n: int, candidate: Candidate) -> Proposal:
        probe, j_old = candidate.probe, self._j(self.incumbent)
        j_new = self._j(probe)
        metric = self.ctx.task.metric
        rule, why = accept_rule(j_new, j_old, paired_gain(probe.result.metric, self.incumbent.result.metric,
                                                           metric.higher_is_better))
        return Proposal(
            search=self.name, n=n, key=candidate.child.hash, change=Change(**candidate.mutation.to_dict()),
            rule_accepts=rule, rule=why, diff=candidate.change,
            evidence=Evidence(basis="judge", J=j_new, incumbent_J=j_old,
                              judgement=probe.judgement.to_dict() if probe.judgement else None,
                              checks=[Check(**check_fields(c)) for c in probe.checks], validation=probe.validation,
                              metric=metric.name, higher_is_better=metric.higher_is_better,
                              probe_run_id=probe.result.run_id),
            parent=self.incumbent.workflow.hash, workflow=candidate.child.to_dict())

    def adopt(self, n: int, candidate: Candidate, decision: Decision | None) -> None:
        probe, j_old = candidate.probe, self._j(self.incumbent)
        j_new = self._j(probe)
        accepted = bool(decision and decision.approved)
        mutation = candidate.mutation.to_dict()
        proposal = {k: v for k, v in mutation.items() if k != "author"}
        self.history.append(f"{json.dumps(proposal, sort_keys=True)} -> J {fmt(j_new)} vs {fmt(j_old)}: "
                            f"{'accepted' if accepted else 'rejected'}")
        left = self.ctx.budget.remaining()
        self.ctx.tracer.emit(SearchStep(
            search="mimosa", n=n, mutation=mutation, J=j_new, incumbent_J=j_old, accepted=accepted,
            decided_by=decision.decided_by if decision else "", reason=decision.reason if decision else "",
            checks=probe.checks, budget_left=left, workflow_hash=candidate.child.hash,
            workflow=candidate.child.to_dict() if accepted else None))
        self._record(IterationRecord(n, mutation, True, probe=probe.summary(), J=j_new, incumbent_J=j_old,
                                     accepted=accepted, decided_by=decision.decided_by if decision else "",
                                     budget_left=left, diff=candidate.change, probe_run=probe,
                                     reason=decision.reason if decision else ""))
        if accepted:
            self.incumbent = probe

    def finish_iteration(self, n: int) -> str | None:
        last = self.records[-1] if self.records else None
        if last is not None and last.n == n and last.probe and last.probe["status"] == "stopped":
            return "budget exhausted during a probe"
        return None

    def pending_state(self, candidate: Candidate) -> dict:
        return {"mutation": candidate.mutation.to_dict(), "child": candidate.child.to_dict(),
                "diff": candidate.change, "probe": candidate.probe.checkpoint()}

    def pending_restore(self, state: dict) -> Candidate:
        return Candidate(Mutation.from_dict(state["mutation"]), Workflow.from_dict({**state["child"], "hash": None}),
                         state["diff"], Probe.from_checkpoint(state["probe"]))

    def outcome(self) -> SearchOutcome:
        return SearchOutcome(Endpoint.of_probe(self.first), Endpoint.of_probe(self.incumbent), self.done,
                             self.stopped, self.records)

    # --- progress ------------------------------------------------------------------------------
    def _record(self, r: IterationRecord) -> None:
        self.records.append(r)
        if not r.valid:
            self.ctx.say(f"iter {r.n:>2}  invalid proposal: {shorten(r.problems[0], 100)}")
            return
        m = r.mutation or {}
        checks = r.probe["checks"] if r.probe else []
        passed = sum(1 for c in checks if c["passed"])
        inc = "-" if r.incumbent_J is None else f"{r.incumbent_J:.3f}"
        # the rationale on a line of its own: which criterion a change addresses is the point of it
        self.ctx.say(f"iter {r.n:>2}  {m.get('kind')} on {m.get('target')}\n"
                     f"         why: {shorten(m.get('rationale', ''), 200)}\n"
                     f"         checks {passed}/{len(checks)}  J {fmt(r.J)} vs {inc}  "
                     f"{'ACCEPTED' if r.accepted else 'rejected'} ({r.decided_by})  "
                     f"budget left {r.budget_left.get('tokens')} tokens"
                     + (f"\n         {shorten(r.reason, 160)}" if r.reason else ""))


def check_fields(check: dict) -> dict:
    """A public check as the gate's Check (name, passed, detail)."""
    return {"name": str(check.get("name", "")), "passed": bool(check.get("passed")),
            "detail": str(check.get("detail", ""))}


def emit_judgement(tracer, probe: Probe, n: int) -> None:
    j = probe.judgement
    tracer.emit(Judgement(iteration_n=n, workflow_hash=probe.workflow.hash,
                          **(j.to_dict() if j else {"ok": False, "error": "not judged (run stopped)"}),
                          checks=probe.checks, validation=probe.result.metric), "judge")


def mutator_messages(runner: ProbeRunner, incumbent: Probe, history: list[str]) -> list[dict]:
    """The mutator's prompt: the incumbent workflow, the judge's score and feedback per criterion,
    the incumbent's failed public checks (what a change must address first), the data report, the
    approach its plan took and what was tried."""
    j = incumbent.judgement
    feedback = "\n".join(f"- {c}: {j.scores.get(c)} — {j.feedback.get(c)}" for c in j.scores) if j and j.ok \
        else f"(no judgement: {j.error if j else 'not judged'})"
    failed = [c for c in incumbent.checks if not c.get("passed")]
    failed_checks = ("\n".join(f"- FAIL {c.get('name')}: {c.get('detail', '')}" for c in failed) if failed
                     else "(all public checks passed)" if incumbent.checks else "(no public checks ran)")
    given = {"workflow": fenced_json(incumbent.workflow.to_dict(), indent=1, sort_keys=False),
             "judge_feedback": feedback, "failed_checks": failed_checks, "report": incumbent.report()[:3000],
             "history": "\n".join(history) or "(nothing tried yet)"}
    if incumbent.approach():
        given["approach"] = incumbent.approach()
    tools = getattr(runner, "tools", None)
    registry = tools.registry if tools is not None else None
    if registry is not None and registry.specs:  # only where there are MCP tools to move
        given["tool_use"] = tool_use(incumbent, registry)
    return build_messages("mutator", MUTATOR_PROCEDURE, MUTATOR_FORMAT, runner.task.description(), given)


def tool_use(probe: Probe, registry) -> str:
    """How each agent's MCP tools served it in the probe (calls, failures, the last error, or
    never called), then the discovered tools no agent has, one line each."""
    calls: dict[tuple[str, str], list[McpToolResult]] = {}
    for e, result in typed_events(probe.events, "mcp_tool_result"):
        calls.setdefault((e.agent or "", result.tool), []).append(result)
    lines, held = [], set()
    for agent in probe.workflow.agents:
        for tool in agent.tools:
            if not tool.startswith(MCP_PREFIX):
                continue
            held.add(tool)
            made = calls.get((agent.id, tool), [])
            failed = [c for c in made if not c.ok]
            if not made:
                lines.append(f"- {agent.id} {tool}: never called")
            else:
                last = f" (last error: {str(failed[-1].error)[:200]})" if failed else ""
                lines.append(f"- {agent.id} {tool}: {len(made)} call(s), {len(made) - len(failed)} ok, "
                             f"{len(failed)} failed{last}")
    for name, spec in sorted(registry.specs.items()):
        if name not in held:
            lines.append(f"- not allocated: {name} — {spec.description[:160]}")
    return "\n".join(lines) or "(no MCP tools)"
