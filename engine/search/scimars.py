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
from dataclasses import dataclass, field, replace

from ..answers import AnswerContract, AnswerProblem, ask, json_reader
from ..artifacts import ArtifactStore, sha256_file
from ..console import shorten
from ..errors import BudgetExhausted, ModelCallError, WorkflowValidationError
from ..evidence.graph import Author
from ..gateway import ModelGateway
from ..mutations import Mutation, MutationError, diff
from ..prompt_format import build_messages, fenced_json
from ..protocol.checkpoints import ScimarsState
from ..protocol.events import Composition, EditorProbe, MutationProposed, Reflection, ReuseReceipt, SearchStep
from ..protocol.gate import Change, Check, Decision, Evidence
from ..protocol.gate import Proposal as GateProposal
from ..protocol.panels import Card, Group, Line, Panel, TraceEvent, cards, change_line, chart, decided, fmt
from ..selection import paired_gain
from ..trace import Tracer, typed_events
from ..workflow import Workflow
from .base import Endpoint, HumanEdit, Search, SearchOutcome, ask_mutation, edit_change
from .mimosa import check_fields
from .probe import Probe, ProbeRunner

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


# --- records --------------------------------------------------------------------------------
@dataclass
class EditorProposal:
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

    def to_state(self) -> dict:
        return {"editor": self.editor, "mutation": self.mutation, "valid": self.valid, "problems": self.problems,
                "diff": self.diff, "probe": self.probe, "supported": self.supported, "receipt": self.receipt,
                "probe_run": self.probe_run.checkpoint() if self.probe_run else None,
                "workflow": self.workflow.to_dict() if self.workflow else None}

    @classmethod
    def from_state(cls, d: dict) -> "EditorProposal":
        return cls(d["editor"], d["mutation"], d["valid"], d["problems"], d["diff"], d["probe"], d["supported"],
                   d["receipt"], Probe.from_checkpoint(d["probe_run"]) if d.get("probe_run") else None,
                   Workflow.from_dict({**d["workflow"], "hash": None}) if d.get("workflow") else None)


@dataclass
class RoundRecord:
    n: int
    reference: dict
    proposals: list[EditorProposal]
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
    cache: "ReuseCache | None" = field(default=None, repr=False)  # this round's executions

    def to_state(self) -> dict:
        """A probed round waiting for the gate, to finish it after a resume."""
        return {"n": self.n, "reference": self.reference, "proposals": [p.to_state() for p in self.proposals],
                "decision": self.decision, "chosen": self.chosen, "combination": self.combination,
                "selected": self.selected, "receipts": self.receipts, "stopped": self.stopped,
                "reference_run": self.reference_run.checkpoint(), "selected_run": self.selected_run.checkpoint()}

    @classmethod
    def from_state(cls, d: dict) -> "RoundRecord":
        return cls(d["n"], d["reference"], [EditorProposal.from_state(p) for p in d["proposals"]],
                   decision=d["decision"], chosen=list(d["chosen"]), combination=d["combination"],
                   selected=d["selected"], receipts=list(d["receipts"]), stopped=d["stopped"],
                   reference_run=Probe.from_checkpoint(d["reference_run"]),
                   selected_run=Probe.from_checkpoint(d["selected_run"]))


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
    """Checks at least as good as the reference's, and a better validation score: beyond the
    paired noise across folds where both were validated on the same folds (selection.py)."""
    if candidate.result.status == "stopped" or candidate.validation is None:
        return False
    if (candidate.all_checks_pass, candidate.checks_passed) < (reference.all_checks_pass, reference.checks_passed):
        return False
    if reference.validation is None:
        return True
    gain = paired_gain(candidate.result.metric, reference.result.metric, higher_is_better)
    if gain is not None:
        return gain.significant
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
    answer_format = EDITOR_FORMAT.replace("{kinds}", ", ".join(EDITOR_KINDS[editor]))
    return build_messages(editor, EDITOR_PROCEDURES[editor], answer_format, runner.task.description(), {
        "workflow": fenced_json(reference.workflow.to_dict(), indent=1, sort_keys=False),
        "public_checks": _checks_text(reference), "validation": _validation_text(reference, runner),
        "report": reference.report()[:3000] or "(no report)"}, lessons=lessons)


def reflector_messages(runner: ProbeRunner, evidence: dict, lessons: list[str]) -> list[dict]:
    return build_messages("reflector", REFLECTOR_PROCEDURE, REFLECTOR_FORMAT, runner.task.description(),
                          {"round_evidence": fenced_json(evidence, indent=1)}, lessons=lessons)


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
                self.tracer.emit(ReuseReceipt(**receipt))
                return replace(earlier, workflow=workflow), receipt
            probe = self.runner.run(workflow, label, iteration)
            receipt = {"workflow_hash": key, "reused_run_id": None, "rerun_id": probe.result.run_id,
                       "earlier_run_id": earlier.result.run_id, "program_sha256": saved["code_sha256"],
                       "label": label, "verified": False, "reason": f"rerun: {why}"}
            self.receipts.append(receipt)
            self.tracer.emit(ReuseReceipt(**receipt))
        else:
            probe, receipt = self.runner.run(workflow, label, iteration), None
        if probe.result.status != "stopped":
            self.entries[key] = (probe, self._save_program(probe))
        return probe, receipt


# --- the search -------------------------------------------------------------------------------
class ScimarsSearch(Search):
    """SciMARS rounds. The gate sees the composer's choice (adopt or combine) before it becomes
    the next round's harness; a person's edit becomes the next round's reference."""

    name = "scimars"
    title = "SciMARS rounds"
    State = ScimarsState
    unit = "round"
    model_roles = EDITORS + ("reflector",)
    adopts_edits = True
    presents = ("reuse_receipt", "mutation_proposed", "search_iteration", "composition", "reflection")

    @classmethod
    def present(cls, events: list[TraceEvent]) -> list[Panel]:
        """Each round: its reference run, each editor's proposal and probe, the composition and
        why, the gate's word, reuse receipts and the lessons drawn; validation per round."""
        rounds: dict[int, Group] = {}
        xs, reference, chosen = [], [], []
        editors: dict[str, tuple[list, list]] = {}

        def group(n: int | None) -> Group:
            n = n or 0
            return rounds.setdefault(n, Group(f"Round {n}"))

        for e, p in typed_events(events):
            if isinstance(p, ReuseReceipt):
                if p.verified:
                    card = Card(f"reused: {p.label}", "receipt", "plain",
                                [f"run {p.reused_run_id} taken again: program and predictions verified intact"])
                else:
                    card = Card(f"ran again: {p.label}", "rerun", "wait",
                                [p.reason or "the earlier run could not be reused"])
                group(e.iteration).cards.append(card)
            elif isinstance(p, MutationProposed) and p.editor and not p.valid:
                group(e.iteration).cards.append(Card(f"{p.editor}: no usable proposal", "invalid", "bad",
                                                     [str(x) for x in (p.problems or [])[:3]]))
            elif isinstance(p, EditorProbe) and p.search == cls.name:
                mutation = p.mutation
                supported = p.supported
                group(p.n).cards.append(Card(
                    f"{p.editor}: {change_line(mutation.model_dump())}", "supported" if supported else "not supported",
                    "good" if supported else "plain",
                    [line for line in (mutation.rationale,
                                       f"probe validation {fmt(p.validation)} against the reference's "
                                       f"{fmt(p.reference_validation)}") if line]))
                ys = editors.setdefault(p.editor, ([], []))
                ys[0].append(p.n), ys[1].append(p.validation)
            elif isinstance(p, SearchStep) and p.search == cls.name and p.mutation:
                group(p.n).cards.append(Card(change_line(p.mutation.model_dump()), "adopted", "good",
                                             [f"by {decided(p.decided_by)}; this round's reference"]))
            elif isinstance(p, Composition) and p.note:
                group(p.n).cards.append(Card("composer: not combined", "note", "wait", [p.note]))
            elif isinstance(p, Composition) and p.gate is None and p.decision:
                what = p.decision + (f" {', '.join(p.editors or [])}" if p.editors else "")
                group(p.n).cards.append(Card(
                    f"composer: {what}", "kept" if p.decision == "keep" else "chosen",
                    "plain" if p.decision == "keep" else "good",
                    [f"supported: {', '.join(p.supported or []) or 'none'}",
                     f"selected by public checks ({p.checks_passed} passed), then validation "
                     f"{fmt(p.validation)} against the reference's {fmt(p.reference_validation)}"]))
                xs.append(p.n), reference.append(p.reference_validation), chosen.append(p.validation)
                group(p.n).cards.insert(0, Card("reference run", "", "plain", [
                    f"validation {fmt(p.reference_validation)}: the round's harness as it stands, "
                    "what each editor's probe is compared with"]))
            elif isinstance(p, Composition) and p.gate is not None:
                approved = bool(p.approved)
                group(p.n).cards.append(Card(
                    f"gate: {p.decision}", "approved" if approved else "vetoed", "good" if approved else "bad",
                    [f"decided by {decided(p.gate)}" + (f": {p.reason}" if p.reason else "")]))
            elif isinstance(p, Reflection):
                group(p.n).cards.append(Card(f"lessons ({p.source})", "", "plain", list(p.lessons)[:6]))
        lines = [Line("reference run", xs, reference, "lines+markers"),
                 Line("composed successor", xs, chosen, "markers")]
        lines += [Line(name, x, y, "markers") for name, (x, y) in sorted(editors.items())]
        panels = [chart("Validation per round", lines, "round", "validation",
                        note="the round's reference run, each editor's probe and the composer's choice")] if xs or editors else []
        if rounds:
            panels.append(cards("Rounds", [rounds[n] for n in sorted(rounds, reverse=True)], note="latest first"))
        return panels

    def __init__(self, ctx):
        super().__init__(ctx)
        self.current: Workflow = ctx.initial
        self.first: Probe | None = None
        self.best: Probe | None = None
        self.lessons: list[str] = []
        self.hib = ctx.task.metric.higher_is_better
        # Executions stay reusable across rounds: the next round's reference is this round's
        # successor, already run, and is reused with a receipt while its program is intact.
        self.cache = ReuseCache(ctx.runner, ctx.tracer)

    @property
    def runner(self) -> ProbeRunner:
        return self.ctx.runner

    def begin(self) -> None:
        self.current = self.ctx.initial

    def snapshot(self) -> ScimarsState:
        return ScimarsState(current=self.current.to_dict(), lessons=self.lessons,
                            first=self.first.checkpoint() if self.first else None,
                            best=self.best.checkpoint() if self.best else None)

    def restore(self, state: ScimarsState) -> None:
        self.current = Workflow.from_dict({**state.current, "hash": None})
        self.first = Probe.from_checkpoint(state.first.model_dump()) if state.first else None
        self.best = Probe.from_checkpoint(state.best.model_dump()) if state.best else None
        self.lessons = list(state.lessons)

    def current_workflow(self) -> Workflow:
        return self.current

    def adopt_edit(self, n: int, edit: HumanEdit) -> bool:
        """A person's edit replaces the harness; this round's reference run probes it."""
        tracer, mutation = self.ctx.tracer, edit_change(edit)
        tracer.emit(MutationProposed(valid=True, mutation=mutation, diff=diff(self.current, edit.workflow),
                                     parent_hash=self.current.hash, child_hash=edit.workflow.hash), edit.author)
        tracer.emit(SearchStep(search="scimars", n=n, mutation=mutation, accepted=True,
                                    decided_by=edit.author, reason="edited by a person",
                                    workflow_hash=edit.workflow.hash, workflow=edit.workflow.to_dict(),
                                    budget_left=self.ctx.budget.remaining()))
        self.current = edit.workflow
        return False

    # --- one round: reference and editors, probes and composition, the gate, reflection ----------
    def propose(self, n: int, move) -> RoundRecord:
        cache = self.cache
        cache.receipts = []  # this round's receipts (the record keeps the list)
        reference, _ = cache.probe(self.current, f"r{n}-reference", n)
        record = RoundRecord(n, reference.summary(), [], reference_run=reference, selected_run=reference,
                             receipts=cache.receipts, cache=cache)
        if reference.result.status == "stopped":
            record.stopped = "budget exhausted during the reference run"
            return record
        # editors: each sees only the reference evidence and the lessons, never another proposal
        try:
            for editor in EDITORS:
                record.proposals.append(_propose(editor, self.runner, reference, self.lessons, self.ctx.gateway,
                                                 self.ctx.tracer))
        except BudgetExhausted as exc:
            record.stopped = f"budget exhausted: {exc.reason}"
        return record

    def probe(self, n: int, record: RoundRecord) -> None:
        """Each valid proposal in isolation against the reference (same inputs, seed, limits),
        then the composer's choice: keep, adopt one, or combine several (with its own probe)."""
        if record.stopped:
            return
        tracer, reference, cache = self.ctx.tracer, record.reference_run, record.cache
        for p in record.proposals:
            if not p.valid:
                continue
            probe, p.receipt = cache.probe(p.workflow, f"r{n}-{p.editor}", n)
            p.probe_run, p.probe = probe, probe.summary()
            if probe.result.status == "stopped":
                record.stopped = "budget exhausted during a probe"
                return
            p.supported = is_supported(probe, reference, self.hib)
            tracer.emit(EditorProbe(search="scimars", n=n, editor=p.editor, mutation=p.mutation,
                                        supported=p.supported, checks=probe.checks, validation=probe.validation,
                                        reference_validation=reference.validation,
                                        workflow_hash=probe.workflow.hash, receipt=p.receipt,
                                        budget_left=self.ctx.budget.remaining()))
        supported = [p for p in record.proposals if p.supported]
        candidates: list[tuple[str, list[str], Probe]] = [("keep", [], reference)]
        candidates += [("adopt", [p.editor], p.probe_run) for p in supported]
        if len(supported) >= 2:
            combo_wf, used = self.current, []
            for p in supported:
                try:
                    combo_wf = Mutation.from_dict(p.mutation).apply(combo_wf)
                    used.append(p.editor)
                except (MutationError, WorkflowValidationError) as exc:
                    tracer.emit(Composition(n=n, note=f"{p.editor}'s change does not combine: {exc}"))
            if len(used) >= 2:
                combo, receipt = cache.probe(combo_wf, f"r{n}-combined", n)
                record.combination = {"editors": used, "probe": combo.summary(), "receipt": receipt,
                                      "workflow_hash": combo_wf.hash}
                if combo.result.status == "stopped":
                    record.stopped = "budget exhausted during a probe"
                else:
                    candidates.append(("combine", used, combo))
        # select by public checks only, tie-broken by validation (first wins a full tie)
        best_i = max(range(len(candidates)), key=lambda i: (selection_key(candidates[i][2], self.hib), -i))
        record.decision, record.chosen, record.selected_run = candidates[best_i]
        if record.decision != "keep":
            # The composed successor was run this round: it is taken from that execution with a
            # receipt (program and predictions verified intact), or run again if they are not.
            successor, _ = cache.probe(record.selected_run.workflow, f"r{n}-successor", n)
            if successor.result.status == "stopped":
                record.stopped = "budget exhausted during a probe"
                record.decision, record.chosen, successor = "keep", [], reference
            record.selected_run = successor
        record.selected = record.selected_run.summary()
        tracer.emit(Composition(n=n, decision=record.decision, editors=record.chosen,
                                workflow_hash=record.selected_run.workflow.hash,
                                checks_passed=record.selected_run.checks_passed,
                                validation=record.selected_run.validation, reference_validation=reference.validation,
                                supported=[p.editor for p in supported]))

    def proposal(self, n: int, record: RoundRecord) -> GateProposal | None:
        """The composer chose a change (selected by public checks): the gate may veto it."""
        if record.decision == "keep" or record.selected_run is None:
            return None
        selected, reference = record.selected_run, record.reference_run
        metric = self.ctx.task.metric
        return GateProposal(
            search=self.name, n=n, key=selected.workflow.hash,
            change=Change(kind=f"scimars_{record.decision}", target=", ".join(record.chosen),
                          params={"editors": record.chosen}, author="composer",
                          rationale="; ".join(p.mutation.get("rationale", "") for p in record.proposals
                                              if p.editor in record.chosen and p.mutation)),
            rule_accepts=True, rule="chosen by the composer on public checks",
            evidence=Evidence(basis="checks", checks=[Check(**check_fields(c)) for c in selected.checks],
                              validation=selected.validation, reference_validation=reference.validation,
                              metric=metric.name, higher_is_better=metric.higher_is_better,
                              probe_run_id=selected.result.run_id),
            diff=diff(self.current, selected.workflow), parent=self.current.hash,
            workflow=selected.workflow.to_dict())

    def adopt(self, n: int, record: RoundRecord, decision: Decision | None) -> None:
        reference = record.reference_run
        if decision is not None:
            if not decision.approved:
                record.decision, record.chosen, record.selected_run = "keep", [], reference
                record.selected = reference.summary()
            self.ctx.tracer.emit(Composition(
                n=n, gate=decision.decided_by, approved=decision.approved, reason=decision.reason,
                decision=record.decision, workflow_hash=record.selected_run.workflow.hash,
                workflow=record.selected_run.workflow.to_dict() if decision.approved else None))
        if not record.stopped:  # grounded lessons for the next round's editors
            try:
                record.lessons = _reflect(n, self.runner, self.ctx.gateway, self.ctx.tracer, record, reference,
                                          self.lessons)
            except BudgetExhausted as exc:
                record.stopped = f"budget exhausted: {exc.reason}"
                record.lessons = _fallback_lessons(n, _evidence(n, record, reference, self.runner))
        record.budget_left = self.ctx.budget.remaining()
        if record.selected is None:
            record.selected = (record.selected_run or reference).summary()
        memory = self.runner.memory
        if memory is not None and record.selected_run is not None:
            # the selected branch's records are kept for later rounds; the others' are not seen
            kept = _branch(record.selected_run)
            ran = {_branch(p) for p, _ in record.cache.entries.values()} if record.cache else set()
            ran |= {_branch(p.probe_run) for p in record.proposals if p.probe_run is not None}
            memory.settle([kept], sorted(b for b in ran - {kept} if b), n)
        if self.first is None and reference is not None:
            self.first = reference
        self.best = record.selected_run or reference
        self.current = self.best.workflow
        self.lessons = self.lessons + record.lessons
        self.records.append(record)
        self._print(record)

    def finish_iteration(self, n: int) -> str | None:
        last = self.records[-1] if self.records else None
        return last.stopped if last is not None and last.n == n else None

    def pending_state(self, record: RoundRecord) -> dict:
        return record.to_state()

    def pending_restore(self, state: dict) -> RoundRecord:
        return RoundRecord.from_state(state)

    def outcome(self) -> SearchOutcome:
        if self.first is None:  # not even one round ran: the reference is still the starting point
            self.first = self.best = self.runner.run(self.ctx.initial, "initial", 0)
        return SearchOutcome(Endpoint.of_probe(self.first), Endpoint.of_probe(self.best or self.first), self.done,
                             self.stopped, self.records)

    def _print(self, r: RoundRecord) -> None:
        """One round: each editor's proposal with its probe's checks, then the composer's choice."""
        lines = [f"round {r.n:>2}  reference validation {_num(((r.reference or {}).get('validation') or {}).get('value'))}"]
        for p in r.proposals:
            m = p.mutation or {}
            if not p.valid:
                lines.append(f"         {p.editor:<20} invalid: {shorten((p.problems or ['?'])[0], 80)}")
                continue
            checks = (p.probe or {}).get("checks", [])
            value = ((p.probe or {}).get("validation") or {}).get("value")
            reused = " (reused)" if p.receipt and p.receipt.get("verified") else ""
            # whether the change reached what ran: a harness edit that leaves the program as it
            # was can only tie
            ran = p.probe_run.result.final_code if p.probe_run else None
            same = ran is not None and r.reference_run is not None and ran == r.reference_run.result.final_code
            reused += "; same program" if same else ("; new program" if ran is not None else "")
            gain = paired_gain((p.probe or {}).get("validation"), (r.reference or {}).get("validation"), self.hib)
            what = ""
            if m.get("kind") == "memory_policy_change":  # what retrieval it changes, in a few words
                what = " " + shorten(json.dumps({k: v for k, v in (m.get("params") or {}).items() if k != "role"},
                                                sort_keys=True), 60)
            lines.append(f"         {p.editor:<20} {m.get('kind')} on {m.get('target')}{what}: checks "
                         f"{sum(c['passed'] for c in checks)}/{len(checks)} validation {_num(value)}"
                         f"{' supported' if p.supported else ''}{reused}"
                         + (f"\n{'':30}{gain.describe()}" if gain else ""))
        lines.append(f"         decision: {r.decision}{' (' + ', '.join(r.chosen) + ')' if r.chosen else ''}  "
                     f"budget left {r.budget_left.get('tokens')} tokens")
        self.ctx.say("\n".join(lines))


def _num(x) -> str:
    return "-" if x is None else f"{x:.4g}"


def _branch(probe: Probe) -> str:
    """The evidence-graph branch a probe wrote on: its run id (its folder's name, with an
    ``-attempt<n>`` suffix when it ran again after a resume; engine/runner.py)."""
    return probe.result.run_id


def _propose(editor: str, runner: ProbeRunner, reference: Probe, lessons: list[str], gateway: ModelGateway,
             tracer: Tracer) -> EditorProposal:
    messages = editor_messages(editor, runner, reference, lessons)
    try:
        text, proposed, problems = ask_mutation(gateway, editor, messages, reference.workflow)
    except ModelCallError as exc:
        tracer.emit(MutationProposed(editor=editor, valid=False, problems=[str(exc)]), editor)
        return EditorProposal(editor, None, False, [f"{editor} failed: {exc}"])
    if proposed is None:
        tracer.emit(MutationProposed(editor=editor, valid=False, problems=problems, raw=text[:2000]), editor)
        return EditorProposal(editor, None, False, problems)
    mutation, child = proposed
    return check_proposal(editor, mutation, reference.workflow, child, tracer)


def check_proposal(editor: str, mutation: Mutation, parent: Workflow, child: Workflow,
                   tracer: Tracer | None = None) -> EditorProposal:
    """Record a proposal, rejecting it if it leaves its editor's editable surface."""
    problems = surface_problems(editor, mutation, parent, child)
    change = diff(parent, child)
    if tracer is not None:
        tracer.emit(MutationProposed(editor=editor, valid=not problems, problems=problems,
                                     mutation=mutation.to_dict(), diff=change, parent_hash=parent.hash,
                                     child_hash=child.hash), editor)
    if problems:
        return EditorProposal(editor, mutation.to_dict(), False, problems, diff=change)
    return EditorProposal(editor, mutation.to_dict(), True, diff=change, workflow=child)


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
            "selected": brief(record.selected_run),
            # executions taken from earlier runs instead of being run again (reuse receipts)
            "reused": [{"label": r.get("label"), "reused_run_id": r.get("reused_run_id"),
                        "verified": r.get("verified"), "reason": r.get("reason")} for r in record.receipts]}


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
    for r in evidence.get("reused", []):
        out.append(f"round {n}: {r['label']} " + (f"reused execution {r['reused_run_id']} (receipt verified)"
                                                   if r["verified"] else f"was run again: {r.get('reason')}"))
    return out


def _lessons(data: dict) -> list[str]:
    found = data.get("lessons")
    if not isinstance(found, list) or not [x for x in found if str(x).strip()]:
        raise AnswerProblem('"lessons" must be a list of non-empty sentences')
    return [str(x) for x in found if str(x).strip()]


LESSONS = AnswerContract("lessons", 'Reply with one JSON object {"lessons": ["...", ...]}.', json_reader(_lessons),
                         {"type": "object", "required": ["lessons"],
                          "properties": {"lessons": {"type": "array", "items": {"type": "string"}}}})


def _reflect(n: int, runner: ProbeRunner, gateway: ModelGateway, tracer: Tracer, record: RoundRecord,
             reference: Probe, lessons: list[str]) -> list[str]:
    evidence = _evidence(n, record, reference, runner)
    source = "reflector"
    try:
        new = ask(gateway, "reflector", "reflector", reflector_messages(runner, evidence, lessons), LESSONS,
                  temperature=0.3, purpose="reflection").value or []
    except ModelCallError:
        new = []
    if not new:
        new, source = _fallback_lessons(n, evidence), "engine"
    evidence_sha256 = hashlib.sha256(json.dumps(evidence, sort_keys=True, default=str).encode()).hexdigest()
    tracer.emit(Reflection(n=n, lessons=new, source=source, evidence_sha256=evidence_sha256), "reflector")
    if runner.memory is not None:  # with shared memory, the lessons are records every later role may retrieve
        for lesson in new:
            runner.memory.record(Author(agent="reflector", role="reflector"), "lesson", lesson, n, ("reflection",))
    return new


__all__ = ["EDITORS", "EDITOR_KINDS", "EditorProposal", "ScimarsSearch", "ReuseCache", "RoundRecord", "check_proposal",
           "coordination_changes", "editor_messages", "is_supported", "reflector_messages",
           "selection_key", "surface_problems"]
