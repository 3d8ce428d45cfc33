"""SciMARS harness self-improvement: each round runs the current harness as a reference,
three independent editors (role, coordination, memory) each propose one change from the
reference evidence alone, every proposal is probed in isolation with the same inputs, seed and
limits, a composer keeps, adopts or combines the supported changes (a combination gets its
own probe), selection uses public checks only (tie-broken by the validation score; no judge),
and a reflector writes grounded lessons for the next round's editors.

An execution whose full harness hash matches one already run this round, with its saved
program intact (sha256 of the saved final code and predictions file still matching), is
reused with a reuse receipt instead of being rerun. Editors can never touch the evaluator,
the checks, the tools or the budget: that surface is enforced here, not left to prompts.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field, replace

from ..artifacts import ArtifactStore, sha256_file
from ..errors import BudgetExhausted, ModelCallError, WorkflowValidationError
from ..gateway import ModelGateway
from ..mutations import Mutation, MutationError, diff
from ..prompts import extract_json
from ..trace import Tracer
from ..workflow import Workflow
from .mimosa import SearchOutcome
from .probe import AutoGate, Gate, Probe, ProbeRunner

EDITORS = ("role_editor", "coordination_editor", "memory_editor")
EDITOR_KINDS: dict[str, tuple[str, ...]] = {
    "role_editor": ("procedure_refinement", "prompt_refinement"),
    "coordination_editor": ("route_change", "contract_change", "edge_rewiring"),
    "memory_editor": ("memory_policy_change",),
}
# Which fields of an agent each editor may change (contract changes update an edge's ends).
EDITOR_AGENT_FIELDS: dict[str, frozenset[str]] = {
    "role_editor": frozenset({"prompt"}),
    "coordination_editor": frozenset({"inputs", "outputs"}),
    "memory_editor": frozenset(),
}
# Words that name the evaluator, the held-out data or the budget: no proposal may mention them.
FORBIDDEN_NAMES = ("evaluate.py", "evaluation.md", "heldout", "held-out", "official", "budget", "max_tokens",
                   "max_calls", "max_cost", "public_checks", "check_handoffs", "halt_on_contract_violation",
                   "flag_placeholders")

EDITOR_PROCEDURES: dict[str, str] = {
    "role_editor": (
        "Propose exactly one change to how one role works: refine a role procedure (procedure_refinement, "
        "target = role name, params.procedure = the whole new text) or an agent's own instructions "
        "(prompt_refinement, target = agent id, params.prompt). Ground it in the data report, the public "
        "checks and the lessons; do not repeat a change the lessons say did not help."),
    "coordination_editor": (
        "Propose exactly one change to coordination, touching AT MOST ONE route or contract: a route's loop "
        "cap or target (route_change, target = source agent, params = {on, target, max_loops}), one edge's "
        "contract (contract_change, target = 'source->target:artifact', params.contract) or one edge "
        "(edge_rewiring). You may not change tools, the handoff checks, the evaluator or the budget."),
    "memory_editor": (
        "Propose exactly one change to the shared-memory policy (memory_policy_change, target = 'memory', "
        "params = any of recording_duties, retrieval_filters, query_hints, record_limit, subscriptions). "
        "Ground query hints in the data report. Change the policy only, never stored records."),
}
EDITOR_FORMAT = ('Reply with one ```json block: {"kind": ..., "target": ..., "params": {...}, "rationale": ...}; '
                 "allowed kinds: {kinds}.")
REFLECTOR_PROCEDURE = (
    "Write short, grounded lessons from this round's evidence: which proposed change was supported "
    "(public checks at least as good, validation score better) and by how much, which was not, and "
    "what the composer chose. Quote the numbers; do not speculate beyond them.")
REFLECTOR_FORMAT = 'Reply with one ```json block: {"lessons": ["...", "..."]}.'
SYSTEM_HEADER = "You are the {role} of a Trellis research team working on the task below."


# --- records --------------------------------------------------------------------------------
@dataclass
class Proposal:
    editor: str
    mutation: dict | None
    valid: bool
    problems: list[str] = field(default_factory=list)
    diff: dict | None = None
    probe: dict | None = None
    supported: bool = False
    receipt: dict | None = None
    probe_run: Probe | None = field(default=None, repr=False)
    workflow: Workflow | None = field(default=None, repr=False)


@dataclass
class RoundRecord:
    n: int
    reference: dict
    proposals: list[Proposal]
    decision: str = "keep"            # keep / adopt / combine
    chosen: list[str] = field(default_factory=list)  # editors whose changes the final holds
    combination: dict | None = None
    selected: dict | None = None
    lessons: list[str] = field(default_factory=list)
    receipts: list[dict] = field(default_factory=list)
    budget_left: dict = field(default_factory=dict)
    stopped: str | None = None
    reference_run: Probe | None = field(default=None, repr=False)
    selected_run: Probe | None = field(default=None, repr=False)

    # a compatible face for code that prints Mimosa's IterationRecord
    @property
    def accepted(self) -> bool:
        return self.decision != "keep"


# --- scoring ----------------------------------------------------------------------------------
def _validation_key(probe: Probe, higher_is_better: bool) -> float:
    v = probe.validation
    if v is None:
        return float("-inf")
    return float(v) if higher_is_better else -float(v)


def selection_key(probe: Probe, higher_is_better: bool) -> tuple:
    """Public checks first (the gate: all pass, then how many), validation score breaks ties."""
    return (probe.all_checks_pass, probe.checks_passed, _validation_key(probe, higher_is_better))


def is_supported(candidate: Probe, reference: Probe, higher_is_better: bool) -> bool:
    """Checks at least as good as the reference's, and a strictly better validation score."""
    if candidate.result.status == "stopped" or candidate.validation is None:
        return False
    if (candidate.all_checks_pass, candidate.checks_passed) < (reference.all_checks_pass, reference.checks_passed):
        return False
    if reference.validation is None:
        return True
    return _validation_key(candidate, higher_is_better) > _validation_key(reference, higher_is_better)


# --- the bounded editable surface -----------------------------------------------------------
def _edge_key(e: dict) -> tuple:
    return (e["source"], e["target"], e["artifact"])


def coordination_changes(change: dict) -> int:
    """How many distinct routes and edges (a contract lives on an edge) a diff touches."""
    routes = {(r["source"], r["on"]) for r in change["routes_added"] + change["routes_removed"]}
    edges = {_edge_key(e) for e in change["edges_added"] + change["edges_removed"]}
    return len(routes) + len(edges)


def _mentions_forbidden(obj: object) -> str | None:
    text = json.dumps(obj, default=str).lower()
    return next((w for w in FORBIDDEN_NAMES if w in text), None)


def surface_problems(editor: str, mutation: Mutation, parent: Workflow, child: Workflow) -> list[str]:
    """Every way a proposal leaves its editor's editable surface. Empty means allowed."""
    out: list[str] = []
    if mutation.kind not in EDITOR_KINDS[editor]:
        out.append(f"the {editor} may not propose {mutation.kind}; allowed: {', '.join(EDITOR_KINDS[editor])}")
    word = _mentions_forbidden({"target": mutation.target, "params": mutation.params})
    if word:
        out.append(f"the proposal names {word!r}: the evaluator, checks and budget are outside the editable surface")
    change = diff(parent, child)
    if change["agents_added"] or change["agents_removed"]:
        out.append("editors may not add or remove agents")
    for aid, fields in change["agents_changed"].items():
        if "tools" in fields:
            out.append(f"the proposal changes the tools of agent {aid!r}; tools are outside the editable surface")
        if "model" in fields:
            out.append(f"the proposal changes the model of agent {aid!r}; models are outside the editable surface")
        other = set(fields) - {"tools", "model"} - EDITOR_AGENT_FIELDS[editor]
        if other:
            out.append(f"the {editor} may not change {', '.join(sorted(other))} of agent {aid!r}")
    before = {a.id: set(a.tools) for a in parent.agents}
    for a in child.agents:
        gained = set(a.tools) - before.get(a.id, set())
        if gained:
            out.append(f"the proposal adds tool(s) {', '.join(sorted(gained))} to agent {a.id!r}")
    if change["coordination_changed"]:
        out.append("the proposal changes the handoff checks (coordination flags); checks are outside the "
                   "editable surface")
    if editor != "role_editor" and change["procedures_changed"]:
        out.append(f"the {editor} may not change role procedures")
    if editor != "memory_editor" and change["memory_changed"]:
        out.append(f"the {editor} may not change the memory policy")
    n = coordination_changes(change)
    if editor == "coordination_editor" and n > 1:
        out.append(f"the coordination editor may change at most one route or contract; this changes {n}")
    if editor != "coordination_editor" and n:
        out.append(f"the {editor} may not change routes, edges or contracts")
    return out


# --- prompts ----------------------------------------------------------------------------------
def _checks_text(probe: Probe) -> str:
    return "\n".join(f"- {'PASS' if c['passed'] else 'FAIL'} {c['name']}: {c.get('detail', '')}"
                     for c in probe.checks) or "(no checks were reported)"


def _validation_text(probe: Probe, runner: ProbeRunner) -> str:
    m = probe.result.metric or {}
    direction = "higher" if runner.task.metric.higher_is_better else "lower"
    if probe.validation is None:
        return f"no validation score ({m.get('error', 'nothing delivered')}); {direction} is better"
    return f"{runner.task.metric.name} = {probe.validation:.6g} on the validation split; {direction} is better"


def editor_messages(editor: str, runner: ProbeRunner, reference: Probe, lessons: list[str]) -> list[dict]:
    """An editor's prompt, built only from the reference evidence and the lessons so far."""
    system = [SYSTEM_HEADER.format(role=editor), "", "## Procedure", EDITOR_PROCEDURES[editor]]
    if lessons:
        system += ["", "## Lessons from earlier runs", *[f"- {x}" for x in lessons]]
    system += ["", "## Answer format", EDITOR_FORMAT.replace("{kinds}", ", ".join(EDITOR_KINDS[editor]))]
    user = [runner.task.description(), "", "## Input: workflow", "```json",
            json.dumps(reference.workflow.to_dict(), indent=1), "```", "",
            "## Input: public_checks", _checks_text(reference), "",
            "## Input: validation", _validation_text(reference, runner), "",
            "## Input: report", reference.report()[:3000] or "(no report)"]
    return [{"role": "system", "content": "\n".join(system)}, {"role": "user", "content": "\n".join(user)}]


def reflector_messages(runner: ProbeRunner, evidence: dict, lessons: list[str]) -> list[dict]:
    system = [SYSTEM_HEADER.format(role="reflector"), "", "## Procedure", REFLECTOR_PROCEDURE]
    if lessons:
        system += ["", "## Lessons from earlier runs", *[f"- {x}" for x in lessons]]
    system += ["", "## Answer format", REFLECTOR_FORMAT]
    user = [runner.task.description(), "", "## Input: round_evidence", "```json",
            json.dumps(evidence, indent=1, sort_keys=True, default=str), "```"]
    return [{"role": "system", "content": "\n".join(system)}, {"role": "user", "content": "\n".join(user)}]


# --- reuse receipts -------------------------------------------------------------------------
class ReuseCache:
    """Executions of this round, keyed on the full harness hash (memory policy included)."""

    def __init__(self, runner: ProbeRunner, tracer: Tracer):
        self.runner = runner
        self.tracer = tracer
        self.entries: dict[str, tuple[Probe, dict]] = {}
        self.receipts: list[dict] = []

    def _save_program(self, probe: Probe) -> dict:
        """Keep the code that ran in the run's artifact store, beside its predictions file."""
        saved: dict = {"predictions_sha256": probe.result.predictions_sha256, "code_sha256": None}
        if probe.run_dir is not None and probe.result.final_code is not None:
            saved["code_sha256"] = ArtifactStore(probe.run_dir / "artifacts").put_bytes(
                probe.result.final_code.encode("utf-8"))
        return saved

    def verify(self, probe: Probe, saved: dict) -> str | None:
        """Why the saved program is not intact, or None when it is."""
        if probe.run_dir is None:
            return "the execution left no run directory"
        if not saved["code_sha256"] or not saved["predictions_sha256"]:
            return "the execution saved no final code or predictions"
        store = ArtifactStore(probe.run_dir / "artifacts")
        for what in ("code_sha256", "predictions_sha256"):
            path = store.path_for(saved[what])
            if not path.exists():
                return f"the saved {what.split('_')[0]} file {saved[what][:12]} is missing"
            actual = sha256_file(path)
            if actual != saved[what]:
                return (f"the saved {what.split('_')[0]} file's sha256 changed: {saved[what][:12]} was recorded, "
                        f"{actual[:12]} is there now")
        return None

    def probe(self, workflow: Workflow, label: str, iteration: int) -> tuple[Probe, dict | None]:
        key = workflow.hash
        hit = self.entries.get(key)
        if hit is not None:
            earlier, saved = hit
            why = self.verify(earlier, saved)
            if why is None:
                receipt = {"workflow_hash": key, "reused_run_id": earlier.result.run_id,
                           "program_sha256": saved["code_sha256"], "predictions_sha256": saved["predictions_sha256"],
                           "label": label, "verified": True}
                self.receipts.append(receipt)
                self.tracer.emit("reuse_receipt", None, **receipt)
                return replace(earlier, workflow=workflow), receipt
            probe = self.runner.run(workflow, label, iteration)
            receipt = {"workflow_hash": key, "reused_run_id": None, "rerun_id": probe.result.run_id,
                       "earlier_run_id": earlier.result.run_id, "program_sha256": saved["code_sha256"],
                       "label": label, "verified": False, "reason": f"rerun: {why}"}
            self.receipts.append(receipt)
            self.tracer.emit("reuse_receipt", None, **receipt)
        else:
            probe, receipt = self.runner.run(workflow, label, iteration), None
        if probe.result.status != "stopped":
            self.entries[key] = (probe, self._save_program(probe))
        return probe, receipt


# --- the search -------------------------------------------------------------------------------
def scimars_search(initial: Workflow, runner: ProbeRunner, gateway: ModelGateway, tracer: Tracer,
                   rounds: int = 3, on_round=None, gate: Gate | None = None, resume: dict | None = None,
                   on_checkpoint=None) -> SearchOutcome:
    """SciMARS rounds. ``gate`` sees the composer's choice (adopt or combine) before it becomes
    the next round's harness, and may hand in a person's edit, which becomes the next round's
    reference. ``on_checkpoint``/``resume`` work as in Mimosa, one checkpoint per round."""
    gate = gate or AutoGate()
    tracer.iteration = 0
    current = initial
    first: Probe | None = None
    best: Probe | None = None
    records: list[RoundRecord] = []
    lessons: list[str] = []
    done = 0
    if resume:
        current = Workflow.from_dict({**resume["current"], "hash": None})
        first = Probe.from_checkpoint(resume["first"]) if resume.get("first") else None
        best = Probe.from_checkpoint(resume["best"]) if resume.get("best") else None
        lessons, done = list(resume.get("lessons", [])), int(resume["n"])
        runner.count = int(resume.get("probes", runner.count))
        runner.budget.restore(**resume["budget"])
    stopped = "round budget reached"
    hib = runner.task.metric.higher_is_better
    for n in range(done + 1, rounds + 1):
        tracer.iteration = n
        edit = gate.human_edit(current)
        if edit:
            current = _adopt_edit(n, current, edit, tracer, runner)
        try:
            record = _round(n, current, runner, gateway, tracer, lessons, hib)
        except BudgetExhausted as exc:
            stopped = f"budget exhausted: {exc.reason}"
            break
        if first is None and record.reference_run is not None:
            first = record.reference_run
        if record.decision != "keep":
            _gate_choice(n, record, current, gate, tracer)
        records.append(record)
        best = record.selected_run or record.reference_run
        current = best.workflow
        lessons = lessons + record.lessons
        if on_checkpoint:
            on_checkpoint({"n": n, "current": current.to_dict(), "lessons": lessons, "probes": runner.count,
                           "first": first.checkpoint() if first else None, "best": best.checkpoint(),
                           "budget": runner.budget.usage_state()})
        if on_round:
            on_round(record)
        if record.stopped:
            stopped = record.stopped
            break
    if first is None:  # not even one round ran: the reference is still the starting point
        first = runner.run(initial, "initial", 0)
        best = first
    return SearchOutcome(first, best or first, records, stopped)


def _adopt_edit(n: int, current: Workflow, edit: tuple[Workflow, str], tracer: Tracer, runner: ProbeRunner) -> Workflow:
    """A person's edit replaces the harness; this round's reference run probes it."""
    workflow, author = edit
    mutation = {"kind": "human_edit", "target": workflow.name, "params": {}, "rationale": workflow.note,
                "author": author}
    tracer.emit("mutation_proposed", author, valid=True, mutation=mutation, diff=diff(current, workflow),
                parent_hash=current.hash, child_hash=workflow.hash)
    tracer.emit("search_iteration", None, search="scimars", n=n, mutation=mutation, accepted=True,
                decided_by=author, reason="edited by a person", workflow_hash=workflow.hash,
                workflow=workflow.to_dict(), budget_left=runner.budget.remaining())
    return workflow


def _gate_choice(n: int, record: RoundRecord, current: Workflow, gate: Gate, tracer: Tracer) -> None:
    """The composer chose a change (selected by public checks); the gate may veto it."""
    selected, reference = record.selected_run, record.reference_run
    mutation = {"kind": f"scimars_{record.decision}", "target": ", ".join(record.chosen),
                "params": {"editors": record.chosen},
                "rationale": "; ".join(p.mutation.get("rationale", "") for p in record.proposals
                                       if p.editor in record.chosen and p.mutation), "author": "composer"}
    approved, by, reason = gate.decide({
        "n": n, "mutation": mutation, "diff": diff(current, selected.workflow), "rule_accepts": True,
        "J": None, "incumbent_J": None, "checks": selected.checks, "judgement": None,
        "validation": selected.result.metric, "reference_validation": reference.result.metric,
        "parent_hash": current.hash, "workflow": selected.workflow.to_dict(), "probe_run_id": selected.result.run_id})
    if not approved:
        record.decision, record.chosen, record.selected_run = "keep", [], reference
        record.selected = reference.summary()
    tracer.emit("composition", None, n=n, gate=by, approved=approved, reason=reason, decision=record.decision,
                workflow_hash=record.selected_run.workflow.hash,
                workflow=record.selected_run.workflow.to_dict() if approved else None)


def _round(n: int, current: Workflow, runner: ProbeRunner, gateway: ModelGateway, tracer: Tracer,
           lessons: list[str], hib: bool) -> RoundRecord:
    cache = ReuseCache(runner, tracer)
    reference, _ = cache.probe(current, f"r{n}-reference", n)
    record = RoundRecord(n, reference.summary(), [], reference_run=reference, selected_run=reference,
                         receipts=cache.receipts)
    if reference.result.status == "stopped":
        record.stopped = "budget exhausted during the reference run"
        return record
    # 1. editors: each sees only the reference evidence and the lessons, never another proposal
    try:
        for editor in EDITORS:
            record.proposals.append(_propose(editor, runner, reference, lessons, gateway, tracer))
    except BudgetExhausted as exc:
        record.stopped = f"budget exhausted: {exc.reason}"
        _finish(record, reference, runner)
        return record
    # 2. probe each valid proposal in isolation against the reference (same inputs, seed, limits)
    for p in record.proposals:
        if not p.valid:
            continue
        probe, p.receipt = cache.probe(p.workflow, f"r{n}-{p.editor}", n)
        p.probe_run, p.probe = probe, probe.summary()
        if probe.result.status == "stopped":
            record.stopped = "budget exhausted during a probe"
            _finish(record, reference, runner)
            return record
        p.supported = is_supported(probe, reference, hib)
        tracer.emit("search_iteration", None, search="scimars", n=n, editor=p.editor, mutation=p.mutation,
                    supported=p.supported, checks=probe.checks, validation=probe.validation,
                    reference_validation=reference.validation, workflow_hash=probe.workflow.hash,
                    receipt=p.receipt, budget_left=runner.budget.remaining())
    # 3. compose: keep, adopt one, or combine several (a combination gets its own probe)
    supported = [p for p in record.proposals if p.supported]
    candidates: list[tuple[str, list[str], Probe]] = [("keep", [], reference)]
    candidates += [("adopt", [p.editor], p.probe_run) for p in supported]
    if len(supported) >= 2:
        combo_wf, used = current, []
        for p in supported:
            try:
                combo_wf = Mutation.from_dict(p.mutation).apply(combo_wf)
                used.append(p.editor)
            except (MutationError, WorkflowValidationError) as exc:
                tracer.emit("composition", None, n=n, note=f"{p.editor}'s change does not combine: {exc}")
        if len(used) >= 2:
            combo, receipt = cache.probe(combo_wf, f"r{n}-combined", n)
            record.combination = {"editors": used, "probe": combo.summary(), "receipt": receipt,
                                  "workflow_hash": combo_wf.hash}
            if combo.result.status == "stopped":
                record.stopped = "budget exhausted during a probe"
            else:
                candidates.append(("combine", used, combo))
    # 4. select by public checks only, tie-broken by validation (first wins a full tie)
    best_i = max(range(len(candidates)), key=lambda i: (selection_key(candidates[i][2], hib), -i))
    decision, chosen, selected = candidates[best_i]
    record.decision, record.chosen, record.selected_run = decision, chosen, selected
    record.selected = selected.summary()
    tracer.emit("composition", None, n=n, decision=decision, editors=chosen, workflow_hash=selected.workflow.hash,
                checks_passed=selected.checks_passed, validation=selected.validation,
                reference_validation=reference.validation,
                supported=[p.editor for p in supported])
    # 5. reflection: grounded lessons for the next round's editors
    if not record.stopped:
        try:
            record.lessons = _reflect(n, runner, gateway, tracer, record, reference, lessons)
        except BudgetExhausted as exc:
            record.stopped = f"budget exhausted: {exc.reason}"
            record.lessons = _fallback_lessons(n, _evidence(n, record, reference, runner))
    _finish(record, reference, runner)
    return record


def _finish(record: RoundRecord, reference: Probe, runner: ProbeRunner) -> None:
    record.budget_left = runner.budget.remaining()
    if record.selected is None:
        record.selected = (record.selected_run or reference).summary()


def _propose(editor: str, runner: ProbeRunner, reference: Probe, lessons: list[str], gateway: ModelGateway,
             tracer: Tracer) -> Proposal:
    messages = editor_messages(editor, runner, reference, lessons)
    try:
        text = gateway.complete(editor, editor, messages, temperature=0.8, purpose="mutation").text
    except ModelCallError as exc:
        tracer.emit("mutation_proposed", editor, editor=editor, valid=False, problems=[str(exc)])
        return Proposal(editor, None, False, [f"{editor} failed: {exc}"])
    try:
        mutation = Mutation.from_dict(extract_json(text))
        mutation = Mutation(mutation.kind, mutation.target, mutation.params, mutation.rationale, author=editor)
        child = mutation.apply(reference.workflow)
    except (MutationError, WorkflowValidationError, ValueError) as exc:
        problems = getattr(exc, "problems", None) or [str(exc)]
        tracer.emit("mutation_proposed", editor, editor=editor, valid=False, problems=problems, raw=text[:2000])
        return Proposal(editor, None, False, problems)
    return check_proposal(editor, mutation, reference.workflow, child, tracer)


def check_proposal(editor: str, mutation: Mutation, parent: Workflow, child: Workflow,
                   tracer: Tracer | None = None) -> Proposal:
    """Record a proposal, rejecting it if it leaves its editor's editable surface."""
    problems = surface_problems(editor, mutation, parent, child)
    change = diff(parent, child)
    if tracer is not None:
        tracer.emit("mutation_proposed", editor, editor=editor, valid=not problems, problems=problems,
                    mutation=mutation.to_dict(), diff=change, parent_hash=parent.hash, child_hash=child.hash)
    if problems:
        return Proposal(editor, mutation.to_dict(), False, problems, diff=change)
    return Proposal(editor, mutation.to_dict(), True, diff=change, workflow=child)


def _evidence(n: int, record: RoundRecord, reference: Probe, runner: ProbeRunner) -> dict:
    def brief(probe: Probe | None) -> dict | None:
        if probe is None:
            return None
        return {"checks_passed": probe.checks_passed, "checks_total": len(probe.checks),
                "validation": probe.validation, "status": probe.result.status}

    ref = brief(reference)
    proposals = []
    for p in record.proposals:
        item = {"editor": p.editor, "valid": p.valid, "problems": p.problems[:3],
                "kind": (p.mutation or {}).get("kind"), "target": (p.mutation or {}).get("target"),
                "params": (p.mutation or {}).get("params"), "supported": p.supported}
        if p.probe_run is not None:
            item["result"] = brief(p.probe_run)
            if p.probe_run.validation is not None and reference.validation is not None:
                item["delta"] = p.probe_run.validation - reference.validation
        proposals.append(item)
    return {"round": n, "metric": runner.task.metric.name, "higher_is_better": runner.task.metric.higher_is_better,
            "reference": ref, "proposals": proposals, "decision": record.decision, "chosen": record.chosen,
            "combination": None if not record.combination else
            {"editors": record.combination["editors"],
             "validation": (record.combination["probe"].get("validation") or {}).get("value")},
            "selected": brief(record.selected_run)}


def _fallback_lessons(n: int, evidence: dict) -> list[str]:
    """Facts written by the engine when the reflector gives nothing usable."""
    out = []
    for p in evidence["proposals"]:
        if not p["valid"]:
            out.append(f"round {n}: the {p['editor']}'s proposal was rejected ({'; '.join(p['problems'])[:160]})")
        elif "result" in p:
            delta = p.get("delta")
            out.append(f"round {n}: {p['kind']} on {p['target']} {json.dumps(p['params'], sort_keys=True)[:200]} was "
                       f"{'supported' if p['supported'] else 'not supported'}: validation "
                       f"{p['result']['validation']} vs {evidence['reference']['validation']}"
                       + (f" ({delta:+.4g})" if delta is not None else ""))
    out.append(f"round {n}: the composer chose to {evidence['decision']}"
               + (f" ({', '.join(evidence['chosen'])})" if evidence["chosen"] else ""))
    return out


def _reflect(n: int, runner: ProbeRunner, gateway: ModelGateway, tracer: Tracer, record: RoundRecord,
             reference: Probe, lessons: list[str]) -> list[str]:
    evidence = _evidence(n, record, reference, runner)
    source = "reflector"
    try:
        text = gateway.complete("reflector", "reflector", reflector_messages(runner, evidence, lessons),
                                temperature=0.3, purpose="reflection").text
        data = extract_json(text)
        found = data.get("lessons") if isinstance(data, dict) else None
        new = [str(x) for x in found if str(x).strip()] if isinstance(found, list) else []
    except (ModelCallError, ValueError):
        new = []
    if not new:
        new, source = _fallback_lessons(n, evidence), "engine"
    tracer.emit("reflection", "reflector", n=n, lessons=new, source=source,
                evidence_sha256=hashlib.sha256(json.dumps(evidence, sort_keys=True, default=str).encode()).hexdigest())
    return new


__all__ = ["EDITORS", "EDITOR_KINDS", "Proposal", "ReuseCache", "RoundRecord", "check_proposal",
           "coordination_changes", "editor_messages", "is_supported", "reflector_messages", "scimars_search",
           "selection_key", "surface_problems"]
