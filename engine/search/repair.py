"""AgentCo-op's Review: execute the workflow, find the node a failure implicates (an agent that
failed, a public check that failed on what it produced, a node that spent more tokens than its
cap), and repair that node and its edges only, as a mutation through the gate (a person may
approve or veto it). It halts when the workflow passes, when the budget is spent, or at the
round cap (the iterations).

The repairs offered for a node come from the failure and the library: the next skill that fits
the node's slot by type and meaning (engine/library), the failure said in the node's prompt, a
repair loop one step longer, a large attachment taken off a node over its token cap. A model in
the ``reviewer`` role picks one or writes its own; what it answers must touch only that node (its
agent, and edges or routes with it at one end), or it is refused and the first ranked repair is
probed instead, with the reason on the trace.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from ..console import shorten
from ..errors import ModelCallError
from ..harness import ROLE_GIVES
from ..library.retrieval import Similarity, retrieve
from ..library.store import load_library
from ..mutations import Mutation, MutationError, diff
from ..prompt_format import build_messages, fenced_json
from ..protocol.checkpoints import RepairState
from ..protocol.events import AgentFinished, MutationProposed, SearchStep, SynthesisStage
from ..protocol.gate import Change, Check, Decision, Evidence, Proposal
from ..protocol.panels import Card, Group, Panel, TraceEvent, cards, change_line, decided
from ..selection import paired_gain
from ..synthesis.stages import plan
from ..trace import typed_events
from ..workflow import MAX_ROUTE_LOOPS, Workflow, WorkflowValidationError
from .base import Endpoint, Search, SearchOutcome, ask_mutation
from .mimosa import check_fields
from .probe import Probe

# What each public check is about: the artifact whose producer a failure implicates.
CHECK_ARTIFACT = {"exit_ok": "code", "output_exists": "code", "output_schema": "code", "finite": "code",
                  "values_vary": "code", "within_range": "code", "beats_trivial": "plan",
                  "claims_match": "final_report", "hash_preserved": "final_report"}
REVIEWER_PROCEDURE = (
    "A node of the team's workflow failed. Choose the repair of that node that addresses the failure: one of "
    "the options (they touch only that node), or one of your own that changes only that agent and edges or "
    "routes with it at one end. Do not repeat a repair the history shows was tried.")
REVIEWER_FORMAT = ('Reply with one ```json block: {"kind": ..., "target": <the node>, "params": {...}, '
                   '"rationale": ...}, e.g. one of the options as given.')


@dataclass(frozen=True)
class Failure:
    node: str
    what: str      # error | check | cost
    detail: str
    role: str = ""

    def line(self) -> str:
        return f"{self.node} ({self.what}): {self.detail}"

    def to_dict(self) -> dict:
        return {"node": self.node, "what": self.what, "detail": self.detail[:500], "role": self.role}


def _producer(workflow: Workflow, artifact: str) -> tuple[str, str] | None:
    """The first agent (in run order) and its role that produce ``artifact``."""
    for agent_id in workflow.order():
        agent = workflow.agent(agent_id)
        for role in agent.roles:
            if artifact in ROLE_GIVES[role]:
                return agent_id, role
    return None


def failures(probe: Probe, token_cap: int | None = None) -> list[Failure]:
    """What failed in ``probe``, each with the node it implicates, in run order of the nodes."""
    wf = probe.workflow
    ids = {a.id for a in wf.agents}
    out: list[Failure] = []
    finished: dict[str, AgentFinished] = {}
    for e, p in typed_events(probe.events, "agent_finished"):
        finished[e.agent or ""] = p
    for agent_id in wf.order():
        p = finished.get(agent_id)
        if p is not None and p.status == "FAILURE":
            out.append(Failure(agent_id, "error", str(p.message)[:500], wf.agent(agent_id).role))
    for c in probe.checks:
        if c.get("passed"):
            continue
        who = _producer(wf, CHECK_ARTIFACT.get(str(c.get("name")), ""))
        node, role = who if who else (str(c.get("agent") or ""), "")
        if node in ids:
            out.append(Failure(node, "check", f"{c.get('name')} failed: {c.get('detail', '')}"[:500],
                               role or wf.agent(node).role))
    if token_cap:
        for agent_id, usage in sorted((probe.result.per_agent_usage or {}).items()):
            if agent_id in ids and int(usage.get("tokens", 0)) > token_cap:
                out.append(Failure(agent_id, "cost", f"spent {int(usage['tokens']):,} tokens, over the cap of "
                                                     f"{token_cap:,} per node", wf.agent(agent_id).role))
    if not out and probe.result.status == "failed":
        last = next((a for a in reversed(wf.order()) if a in finished), wf.order()[0])
        out.append(Failure(last, "error", probe.result.reason[:500], wf.agent(last).role))
    rank = {a: i for i, a in enumerate(wf.order())}
    return sorted(out, key=lambda f: rank.get(f.node, len(rank)))


def local_problem(parent: Workflow, child: Workflow, node: str) -> str | None:
    """Why ``child`` is not a repair of ``node`` alone (its agent, and edges or routes with it at
    one end); None when it is."""
    d = diff(parent, child)
    others = (set(d["agents_added"]) | set(d["agents_removed"]) | set(d["agents_changed"])) - {node}
    if others:
        return f"it changes agent(s) {', '.join(sorted(others))}, not only {node}"
    for key in ("edges_added", "edges_removed", "routes_added", "routes_removed"):
        for item in d[key]:
            if node not in (item["source"], item["target"]):
                return f"it changes {key.split('_')[0][:-1]} {item['source']} -> {item['target']}, which does not touch {node}"
    if d["procedures_changed"] or d["memory_changed"] or d["coordination_changed"]:
        return "it changes the harness (a role's procedure, the memory or the coordination), which every agent of a role shares"
    return None


def repair_options(workflow: Workflow, failure: Failure, alternatives: list, tried: set[str]) -> list[Mutation]:
    """Repairs of ``failure.node`` alone, most specific first, less those already tried.
    ``alternatives``: library hits (engine.library.Hit) for the node's slot, best first."""
    agent = workflow.agent(failure.node)
    role = failure.role or agent.role
    out: list[Mutation] = []
    attached = {x.name for x in agent.attachments}
    if failure.what == "cost":
        big = sorted((x for x in agent.attachments if x.kind in ("resource", "skill")), key=lambda x: -len(x.text))
        if big:
            out.append(Mutation("attachment_change", agent.id, {"remove": big[0].name},
                                f"{failure.detail}: take off its largest attachment, {big[0].title!r} "
                                f"({len(big[0].text):,} characters in every prompt)", "reviewer"))
        out.append(Mutation("prompt_refinement", agent.id, {"prompt": _with_line(
            agent.prompt, "Keep each answer short: what the next role needs and nothing more.")},
            f"{failure.detail}: ask for shorter answers", "reviewer"))
    else:
        own = [x for x in agent.attachments if x.kind == "skill" and x.role in ("", role)]
        for hit in alternatives:
            a = hit.artifact
            if a.kind != "skill" or a.name in attached:
                continue
            add = {"kind": a.kind, "name": a.name, "version": a.version, "title": a.title, "text": a.body,
                   "interface": a.interface(), "role": role}
            params = {"add": add, **({"remove": own[0].name} if own else {})}
            swap = Mutation("attachment_change", agent.id, params,
                            f"{failure.line()}: " + (f"swap the skill {own[0].title!r} for {a.title!r}" if own
                                                    else f"give it the skill {a.title!r}")
                            + f" (fits the {role}'s slot by type; similarity {hit.similarity:.3f})", "reviewer")
            if _key(swap) not in tried:  # a swap already tried and rejected gives way to the next skill
                out.append(swap)
                break
        out.append(Mutation("prompt_refinement", agent.id, {"prompt": _with_line(
            agent.prompt, f"The last run failed here: {failure.detail[:300]}. Address that first.")},
            f"{failure.line()}: say the failure in the node's own prompt", "reviewer"))
        for r in workflow.routes:
            if r.source == agent.id and r.max_loops < MAX_ROUTE_LOOPS:
                out.append(Mutation("route_change", agent.id, {"on": r.on, "target": r.target,
                                                               "max_loops": r.max_loops + 1},
                                    f"{failure.line()}: one more repair loop ({r.max_loops} -> {r.max_loops + 1})",
                                    "reviewer"))
    return [m for m in out if _key(m) not in tried]


def _with_line(prompt: str, line: str) -> str:
    return (prompt.rstrip() + "\n" + line).strip() if line not in prompt else prompt


def _key(m: Mutation) -> str:
    return json.dumps({"kind": m.kind, "target": m.target, "params": m.params}, sort_keys=True, default=str)


@dataclass
class Candidate:
    mutation: Mutation
    child: Workflow
    failure: Failure
    change: dict
    before: list[Failure] = field(default_factory=list)
    probe: Probe | None = None


class RepairSearch(Search):
    name = "repair"
    title = "AgentCo-op review: bounded local repair"
    unit = "round"
    model_roles = ("reviewer",)
    State = RepairState
    adopts_edits = True
    presents = ("synthesis_stage", "search_iteration")

    @classmethod
    def present(cls, events: list[TraceEvent]) -> list[Panel]:
        groups: list[Group] = []
        for e, p in typed_events(events):
            if isinstance(p, SynthesisStage) and p.stage == "review":
                found = p.inputs.get("failures") or []
                if not found:
                    groups.append(Group(f"Round {e.iteration}", [Card("review: the workflow passes", "halted", "good",
                                                                      [p.note])]))
            elif isinstance(p, SearchStep) and p.search == cls.name:
                accepted = p.accepted
                mutation = p.mutation
                groups.append(Group(f"Round {p.n}", [Card(
                    change_line(mutation.model_dump() if mutation else None),
                    "repaired" if accepted else "rejected", "good" if accepted else "bad",
                    [line for line in (mutation.rationale if mutation else "",
                                       f"decided by {decided(p.decided_by)}"
                                       + (f": {p.reason}" if p.reason else "")) if line])]))
        return [cards("Review and repair", reversed(groups), note="latest first")] if groups else []

    def __init__(self, ctx):
        super().__init__(ctx)
        self.first: Probe | None = None
        self.incumbent: Probe | None = None
        self.tried: set[str] = set()
        self.history: list[str] = []
        self.exhausted = ""   # why no repair is left to propose ('' while there is one)
        self._library = None
        self._similarity = None

    # --- state ---------------------------------------------------------------------------------
    def begin(self) -> None:
        self.incumbent = self.first = self.ctx.runner.run(self.ctx.initial, "initial", 0)
        found = failures(self.first, self.ctx.node_token_cap)
        self.ctx.tracer.emit(SynthesisStage(stage="execute", inputs={"workflow_hash": self.first.workflow.hash},
                                            outputs={"status": self.first.result.status,
                                                     "validation": self.first.validation,
                                                     "checks": [check_fields(c) for c in self.first.checks],
                                                     "failures": [f.to_dict() for f in found]},
                                            note=f"{len(found)} failure(s)"), "reviewer")

    def snapshot(self) -> RepairState:
        return RepairState(first=self.first.checkpoint(), incumbent=self.incumbent.checkpoint(),
                           tried=sorted(self.tried), history=self.history)

    def restore(self, state: RepairState) -> None:
        self.first = Probe.from_checkpoint(state.first.model_dump())
        self.incumbent = Probe.from_checkpoint(state.incumbent.model_dump())
        self.tried, self.history = set(state.tried), list(state.history)

    def current_workflow(self) -> Workflow:
        return self.incumbent.workflow

    def stop_reason(self) -> str | None:
        if self.exhausted:
            return self.exhausted
        if self.incumbent.result.status == "stopped":  # a run cut short by the budget passes nothing
            return "budget exhausted during a probe"
        found = failures(self.incumbent, self.ctx.node_token_cap)
        if not found:
            self.ctx.tracer.emit(SynthesisStage(stage="review", inputs={"failures": []}, outputs={},
                                                note="no failed node, no failed check, no node over its cap: "
                                                     "the workflow passes"), "reviewer")
            return "the workflow passes review"
        return None

    def adopt_edit(self, n: int, edit) -> bool:
        probe = self.ctx.runner.run(edit.workflow, f"round{n}-edit", n)
        self.history.append(f"a person edited the workflow ({edit.workflow.note}): adopted")
        self.ctx.tracer.emit(SearchStep(search=self.name, n=n, mutation={"kind": "human_edit", "target": "",
                                                                            "params": {}, "author": edit.author,
                                                                            "rationale": edit.workflow.note},
                                             accepted=True, decided_by=edit.author, reason="edited by a person",
                                             checks=probe.checks, budget_left=self.ctx.budget.remaining(),
                                             workflow_hash=edit.workflow.hash, workflow=edit.workflow.to_dict()))
        self.incumbent = probe
        return True

    # --- one round -----------------------------------------------------------------------------
    def _alternatives(self, failure: Failure) -> list:
        if self._library is None:
            tools = getattr(self.ctx.runner, "tools", None)
            self._library = self.ctx.library or load_library(registry=tools.registry if tools else None)
            self._similarity = Similarity(self.ctx.embedder)
        slot = next((s for s in plan(self.ctx.task, self.incumbent.workflow) if s.role == failure.role), None)
        if slot is None:
            return []
        return retrieve(slot, list(self._library.artifacts.values()), self._similarity, ("skill",), limit=6).hits

    def propose(self, n: int, move) -> Candidate | None:
        parent = self.incumbent.workflow
        found = failures(self.incumbent, self.ctx.node_token_cap)
        failure = found[0]
        options = repair_options(parent, failure, self._alternatives(failure), self.tried)
        self.ctx.tracer.emit(SynthesisStage(stage="review", inputs={"failures": [f.to_dict() for f in found],
                                                                    "implicated": failure.node},
                                            outputs={"options": [m.to_dict() for m in options]},
                                            note=f"repairing {failure.node} only: {shorten(failure.detail, 200)}"),
                             "reviewer")
        if not options:
            self.history.append(f"round {n}: no untried repair for {failure.line()}")
            self.exhausted = f"no untried repair left for {failure.node}"  # the next round stops there
            return None
        mutation, child, refused = self._ask(failure, options, parent)
        self.tried.add(_key(mutation))
        change = diff(parent, child)
        self.ctx.tracer.emit(MutationProposed(valid=True, mutation=mutation.to_dict(), diff=change,
                                              parent_hash=parent.hash, child_hash=child.hash,
                                              **({"problems": [refused]} if refused else {})), "reviewer")
        return Candidate(mutation, child, failure, change, found)

    def _ask(self, failure: Failure, options: list[Mutation], parent: Workflow) -> tuple[Mutation, Workflow, str]:
        """The reviewer's repair, or the first option when its answer is unusable or not local."""
        given = {"failure": failure.line(), "node": fenced_json(parent.agent(failure.node).to_dict(), indent=1),
                 "options": fenced_json([{k: v for k, v in m.to_dict().items() if k != "author"} for m in options],
                                        indent=1),
                 "history": "\n".join(self.history) or "(nothing tried yet)"}
        messages = build_messages("reviewer", REVIEWER_PROCEDURE, REVIEWER_FORMAT, self.ctx.task.description(), given)
        refused = ""
        try:
            _, proposed, problems = ask_mutation(self.ctx.gateway, "reviewer", messages, parent, purpose="repair")
        except ModelCallError as exc:
            proposed, problems = None, [f"the reviewer could not be asked: {exc}"]
        if proposed is not None:
            mutation, child = proposed
            why = local_problem(parent, child, failure.node)
            if why is None:
                return mutation, child, ""
            refused = f"the reviewer's repair was not local ({why}); the first ranked repair instead"
        else:
            refused = f"the reviewer's answer was unusable ({'; '.join(problems[:2])}); the first ranked repair instead"
        for m in options:
            try:
                return m, m.apply(parent), refused
            except (MutationError, WorkflowValidationError) as exc:
                refused += f"; option {m.kind} did not apply ({exc})"
        raise MutationError(refused)

    def probe(self, n: int, candidate: Candidate) -> None:
        candidate.probe = self.ctx.runner.run(candidate.child, f"round{n}", n)

    def proposal(self, n: int, candidate: Candidate) -> Proposal:
        after = failures(candidate.probe, self.ctx.node_token_cap)
        accepts, why = repair_rule(candidate.before, after, candidate.failure, candidate.probe, self.incumbent,
                                   self.ctx.task.metric.higher_is_better)
        probe, metric = candidate.probe, self.ctx.task.metric
        return Proposal(search=self.name, n=n, key=candidate.child.hash, change=Change(**candidate.mutation.to_dict()),
                        rule_accepts=accepts, rule=why, diff=candidate.change,
                        evidence=Evidence(basis="checks", checks=[Check(**check_fields(c)) for c in probe.checks],
                                          validation=probe.validation, reference_validation=self.incumbent.validation,
                                          metric=metric.name, higher_is_better=metric.higher_is_better,
                                          probe_run_id=probe.result.run_id),
                        parent=self.incumbent.workflow.hash, workflow=candidate.child.to_dict())

    def adopt(self, n: int, candidate: Candidate, decision: Decision | None) -> None:
        accepted = bool(decision and decision.approved)
        m = candidate.mutation
        self.history.append(f"round {n}: {m.kind} on {m.target} for '{shorten(candidate.failure.detail, 120)}' -> "
                            f"{'kept' if accepted else 'rejected'}")
        self.ctx.tracer.emit(SearchStep(
            search=self.name, n=n, mutation=m.to_dict(), accepted=accepted,
            decided_by=decision.decided_by if decision else "", reason=decision.reason if decision else "",
            checks=candidate.probe.checks, budget_left=self.ctx.budget.remaining(),
            workflow_hash=candidate.child.hash, workflow=candidate.child.to_dict() if accepted else None))
        self.records.append({"n": n, "mutation": m.to_dict(), "accepted": accepted,
                             "status": candidate.probe.result.status})
        self.ctx.say(f"round {n:>2}  repair {m.kind} on {m.target}: {shorten(m.rationale, 160)}\n"
                     f"          {'KEPT' if accepted else 'rejected'} ({decision.decided_by if decision else ''}): "
                     f"{shorten(decision.reason if decision else '', 160)}")
        if accepted:
            self.incumbent = candidate.probe

    def finish_iteration(self, n: int) -> str | None:
        last = self.records[-1] if self.records else None
        if last is not None and last["n"] == n and last.get("status") == "stopped":
            return "budget exhausted during a probe"
        return None

    def pending_state(self, candidate: Candidate) -> dict:
        return {"mutation": candidate.mutation.to_dict(), "child": candidate.child.to_dict(),
                "failure": candidate.failure.to_dict(), "before": [f.to_dict() for f in candidate.before],
                "diff": candidate.change, "probe": candidate.probe.checkpoint()}

    def pending_restore(self, state: dict) -> Candidate:
        return Candidate(Mutation.from_dict(state["mutation"]), Workflow.from_dict({**state["child"], "hash": None}),
                         Failure(**state["failure"]), state["diff"], [Failure(**f) for f in state["before"]],
                         Probe.from_checkpoint(state["probe"]))

    def outcome(self) -> SearchOutcome:
        return SearchOutcome(Endpoint.of_probe(self.first), Endpoint.of_probe(self.incumbent), self.done,
                             self.stopped, self.records)


def repair_rule(before: list[Failure], after: list[Failure], target: Failure, probe: Probe, incumbent: Probe,
                higher_is_better: bool) -> tuple[bool, str]:
    """A repair is kept when the failure it addressed is gone and no new one appeared, or when
    fewer failures remain; with the same failures, only a validation gain beyond the noise keeps it."""
    lines = {f.line() for f in after}
    new = [f for f in after if f.line() not in {b.line() for b in before}]
    fixed = target.line() not in lines and not any(f.node == target.node and f.what == target.what
                                                       and f.detail.split(":")[0] == target.detail.split(":")[0]
                                                       for f in after)
    if fixed and not new:
        return True, f"the failure at {target.node} is gone and nothing new failed"
    if len(after) < len(before) and not new:
        return True, f"{len(before)} failure(s) before, {len(after)} after"
    if new:
        return False, f"the repair broke something else: {shorten(new[0].line(), 200)}"
    gain = paired_gain(probe.result.metric, incumbent.result.metric, higher_is_better)
    if gain is not None and gain.significant:
        return True, f"the failure remains but the {gain.describe()}"
    return False, f"the failure at {target.node} remains: {shorten(target.detail, 160)}"
