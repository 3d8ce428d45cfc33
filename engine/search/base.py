"""What every search shares: the gate, the context a search runs in, the loop, checkpoints and
resume, and the outcome ``evolve`` scores officially.

A search is a class with the steps of one iteration (DESIGN.md):

- ``plan(n)``: the moves of iteration n (Mimosa and SciMARS: one; the tree: one per parent);
- ``propose(n, move)``: a candidate (a mutated workflow, an editors' round, a child program),
  or None when the proposal was invalid (recorded, nothing to probe);
- ``probe(n, candidate)``: run it in isolation and gather its evidence;
- ``proposal(n, candidate)``: the typed Proposal the gate decides on (engine/protocol/gate.py);
- ``adopt(n, candidate, decision)``: apply the decision;
- ``snapshot()`` / ``restore(state)``: the search's own state for a checkpoint.

A search whose ``concurrency(n)`` is above 1 proposes and probes the moves of an iteration at
once, in threads (``reserve`` fixes in this thread, in move order, what each needs, e.g. the
tree's node ids); the candidates are then settled at the gate one by one in move order, so the
outcome does not depend on which finished first.

The loop here checkpoints after ``begin`` and after every move, and *before* asking the gate,
with the candidate pending: a gate that has no decision yet raises AwaitingDecision, the worker
ends, and the decision resumes the search at that very proposal (no worker waits on a person).
"""
from __future__ import annotations

import contextvars
import json
from abc import ABC, abstractmethod
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, ClassVar, Protocol, TextIO

from pydantic import BaseModel

from .. import answers
from ..assessment import trivial_or_error
from ..budget import Budget
from ..control import Control, NoControl
from ..errors import BudgetExhausted, WorkflowValidationError
from ..gateway import ModelGateway
from ..mutations import KINDS as MUTATION_KINDS
from ..mutations import Mutation, MutationError
from ..prompt_format import extract_json
from ..protocol.checkpoints import Checkpoint, InProgress, from_legacy
from ..protocol.events import MutationProposed
from ..protocol.gate import Decision, Proposal
from ..protocol.panels import Panel, TraceEvent
from ..sandbox import Executor
from ..selection import Unbeaten, unbeaten_baseline
from ..task import Task
from ..trace import Tracer
from ..workflow import Workflow
from .probe import Probe, ProbeRunner


# --- the gate ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class HumanEdit:
    """A workflow version a person wrote, waiting to be adopted by the running search."""

    workflow: Workflow
    author: str
    ref: Any = None     # the gate's own handle on it (the studio: the version's number)
    # The person's change itself and the hash of the workflow they wrote it on: when the search
    # adopted something else meanwhile (a proposal they approved), the change is applied again
    # on top of it instead of their whole version replacing what was approved.
    change: Mutation | None = None
    base: str | None = None


class Gate(Protocol):
    """Where a person (or a policy) approves or vetoes a proposal; the studio implements it.

    ``decide`` returns a Decision, or raises engine.errors.AwaitingDecision when a person has
    not decided yet (the search is checkpointed at that proposal and resumes there)."""

    def decide(self, proposal: Proposal) -> Decision: ...

    def decision_made(self, proposal: Proposal) -> Decision | None:
        """The decision already made on ``proposal``, without waiting for one; None if none yet."""
        ...

    def human_edit(self, incumbent: Workflow) -> HumanEdit | None:
        """A person's version to adopt before the next iteration; None when there is none."""
        ...

    def adopted(self, edit: HumanEdit, n: int) -> None:
        """The search adopted ``edit`` in iteration ``n`` (``edit.workflow`` as adopted)."""
        ...

    def refused(self, edit: HumanEdit, reason: str) -> None:
        """``edit`` cannot be applied (its change no longer fits the workflow): it is dropped."""
        ...


class AutoGate:
    """Fully automatic: the search's own rule decides; nobody edits."""

    def decide(self, proposal: Proposal) -> Decision:
        return Decision.by_rule(proposal)

    def decision_made(self, proposal: Proposal) -> Decision | None:
        return Decision.by_rule(proposal)

    def human_edit(self, incumbent: Workflow) -> HumanEdit | None:
        return None

    def adopted(self, edit: HumanEdit, n: int) -> None:
        return None

    def refused(self, edit: HumanEdit, reason: str) -> None:
        return None


# --- context and outcome ------------------------------------------------------------------------
@dataclass
class SearchContext:
    """What one search run needs, built once by ``evolve``."""

    task: Task
    initial: Workflow
    runner: ProbeRunner
    gateway: ModelGateway
    tracer: Tracer
    executor: Executor
    run_dir: Path
    iterations: int
    seed: int = 0
    gate: Gate = field(default_factory=AutoGate)
    control: Control = field(default_factory=NoControl)
    out: TextIO | None = None
    on_checkpoint: Callable[[dict], None] | None = None
    # AgentCo-op's review (engine/search/repair.py): the library its repairs draw on, the embedder
    # that ranks them (None: shared words), and a node's token cap (None: cost is not reviewed)
    library: Any = None
    embedder: Any = None
    node_token_cap: int | None = None

    @property
    def budget(self) -> Budget:
        return self.gateway.budget

    def say(self, text: str) -> None:
        if self.out is not None:
            self.out.write(text + ("" if text.endswith("\n") else "\n"))
            self.out.flush()


@dataclass
class Endpoint:
    """One end of a search (its start or its final commitment), as the official evaluation and
    the archive need it: a probed workflow, or a program (the tree's nodes)."""

    workflow: Workflow
    validation: float | None
    J: float | None = None
    probe: Probe | None = None
    code: str | None = None
    node: str | None = None
    predictions: bytes | None = None  # the program's on the task's data, written at the final commitment
    checks: list[dict] = field(default_factory=list)  # its public checks (plausibility included): name, passed
    # A trivial baseline handed in instead of what the search found (it beat every candidate on
    # the search's own folds), and the sentence that says so.
    baseline: str | None = None
    verdict: str = ""

    def describe(self) -> dict:
        d = {"workflow_hash": self.workflow.hash, "version": self.workflow.version,
             "validation": self.validation, "J": self.J,
             "checks": [{"name": c["name"], "passed": bool(c.get("passed"))} for c in self.checks]}
        if self.node is not None:
            d["node"] = self.node
        if self.baseline is not None:
            d["baseline"] = self.baseline
        if self.verdict:
            d["verdict"] = self.verdict
        return d

    @classmethod
    def of_probe(cls, probe: Probe) -> "Endpoint":
        return cls(probe.workflow, probe.validation, probe.judgement.J if probe.judgement else None, probe=probe,
                   checks=list(probe.checks))


@dataclass
class ProgramProbed:
    """A program a search validated itself, beside its workflow probes (a tree node): what the
    hindsight scores officially after the final commitment."""

    label: str
    validation: float
    code: str | None


@dataclass
class SearchOutcome:
    initial: Endpoint
    final: Endpoint
    iterations: int       # iterations finished
    stopped: str          # why the search ended
    records: list = field(default_factory=list)
    unbeaten: Unbeaten | None = None  # a trivial baseline that beat every candidate on the search's folds
    searched: Endpoint | None = None  # what the search itself committed to, when a baseline was handed in


# --- shared steps ---------------------------------------------------------------------------------
def parse_mutation(text: str, author: str, parent: Workflow) -> tuple[Mutation, Workflow]:
    """A proposer's answer as a Mutation and the workflow it makes. Raises ValueError (with
    ``problems``, when the workflow rules refused it) for anything unusable."""
    try:
        return _mutation_of(extract_json(text), author, parent)
    except (MutationError, WorkflowValidationError) as exc:
        error = ValueError(str(exc))
        error.problems = getattr(exc, "problems", None) or [str(exc)]  # type: ignore[attr-defined]
        raise error from exc


def _mutation_of(data: object, author: str, parent: Workflow) -> tuple[Mutation, Workflow]:
    mutation = Mutation.from_dict(data)  # type: ignore[arg-type]
    mutation = Mutation(mutation.kind, mutation.target, mutation.params, mutation.rationale, author=author)
    return mutation, mutation.apply(parent)


MUTATION_SCHEMA = {"type": "object", "required": ["kind", "target", "params", "rationale"], "properties": {
    "kind": {"type": "string", "enum": list(MUTATION_KINDS)}, "target": {"type": "string"},
    "params": {"type": "object"}, "rationale": {"type": "string"}}}


def mutation_contract(author: str, parent: Workflow) -> answers.AnswerContract[tuple[Mutation, Workflow]]:
    """A mutation proposal's answer contract: a JSON mutation that applies to ``parent`` under
    the workflow rules; a re-ask names the rule it broke."""
    def check(data: object) -> tuple[Mutation, Workflow]:
        try:
            return _mutation_of(data, author, parent)
        except WorkflowValidationError as exc:
            raise answers.AnswerProblem("the mutated workflow breaks its rules: " + "; ".join(exc.problems[:5])) from None
        except MutationError as exc:
            raise answers.AnswerProblem(str(exc)) from None
    return answers.AnswerContract("mutation", 'Reply with one JSON object {"kind": ..., "target": ..., "params": '
                                  '{...}, "rationale": ...}.', answers.json_reader(check), MUTATION_SCHEMA)


def ask_mutation(gateway: ModelGateway, author: str, messages: list[dict], parent: Workflow,
                 purpose: str = "mutation") -> tuple[str, tuple[Mutation, Workflow] | None, list[str]]:
    """A mutation from ``author`` (re-asked once when unusable): the last answer's text, the
    mutation and its workflow or None, and the problems of an unusable one."""
    answer = answers.ask(gateway, author, author, messages, mutation_contract(author, parent), temperature=0.8,
                         purpose=purpose)
    if answer.value is not None:
        return answer.text, answer.value, []
    try:  # the exact problems of the workflow rules, one per line, as the trace shows them
        parse_mutation(answer.text, author, parent)
    except ValueError as exc:
        return answer.text, None, problems_of(exc)
    return answer.text, None, [answer.problem]


def problems_of(exc: Exception) -> list[str]:
    return list(getattr(exc, "problems", None) or [str(exc)])


def edit_change(edit: HumanEdit) -> dict:
    """A person's edit, in the shape of a proposed change (for traces and the queue)."""
    return {"kind": "human_edit", "target": edit.workflow.name, "params": {}, "rationale": edit.workflow.note,
            "author": edit.author}


def rebase_edit(edit: HumanEdit, current: Workflow) -> HumanEdit | str:
    """``edit`` as it applies to ``current``: unchanged when written on it (or carrying no change
    to re-apply), its change applied again on ``current`` otherwise, or why it no longer applies."""
    if edit.change is None or edit.base is None or edit.base == current.hash:
        return edit
    try:
        workflow = edit.change.apply(current)
    except WorkflowValidationError as exc:
        return "on the current workflow it breaks its rules: " + "; ".join(exc.problems[:5])
    except (MutationError, ValueError) as exc:
        return f"it no longer applies to the current workflow: {exc}"
    if workflow.hash == current.hash:
        return "the current workflow already has this change"
    return HumanEdit(workflow, edit.author, edit.ref, edit.change, current.hash)


def fmt(x: float | None, spec: str = ".3f", none: str = "failed") -> str:
    return none if x is None else format(x, spec)


# Called at the end of each thread a search proposes and probes in (the studio closes the
# database connection the thread's events and controls opened).
THREAD_EXIT_HOOKS: list[Callable[[], None]] = []


# --- the search -----------------------------------------------------------------------------------
class Search(ABC):
    """One search procedure. Subclasses register in engine/search/registry.py."""

    name: ClassVar[str]
    title: ClassVar[str]
    State: ClassVar[type[BaseModel]]      # the search's own checkpoint state (engine/protocol/checkpoints.py)
    unit: ClassVar[str] = "iteration"     # what one step is called on pages ("round" for SciMARS)
    evolves: ClassVar[str] = "workflow"   # what it changes: the team's "workflow", or a "program"
    asks_gate: ClassVar[bool] = True      # False: it never changes anything a person must approve
    adopts_edits: ClassVar[bool] = False  # a person's edit of the workflow is adopted at its next step
    judges: ClassVar[bool] = False        # an LLM judge scores each probe (J and its criteria)
    model_roles: ClassVar[tuple[str, ...]] = ()  # the search's own roles that ask a model (shown with their endpoints)
    writes_bundle: ClassVar[bool] = False  # its champion is packaged (engine/bundle/)
    presents: ClassVar[tuple[str, ...]] = ()  # the trace event kinds ``present`` reads

    # the payload models ``state`` folds (their kinds are what a page reads for it)
    state_payloads: ClassVar[tuple[type, ...]] = ()

    @classmethod
    def state(cls, events: list[TraceEvent], higher_is_better: bool) -> dict | None:
        """The search's own picture beyond its panels, folded from its events (those of
        ``state_payloads``, in order): the tree's nodes, each iteration's parents and the champion,
        which the run page draws and every such event's live message carries. None: it has none."""
        return None

    @classmethod
    def programs_probed(cls, run_dir: Path) -> list[ProgramProbed]:
        """The programs this search validated itself, read from its run folder (every attempt's,
        after a resume); its workflow probes are under probes/, where the hindsight reads them."""
        return []

    @classmethod
    def champion_of(cls, outcome: SearchOutcome) -> Any:
        """What the ending's champion bundle packages (engine/bundle/: the tree, the champion
        node, why the search stopped, its notes), for a search that ``writes_bundle``; else None."""
        return None

    @classmethod
    def present(cls, events: list[TraceEvent]) -> list[Panel]:
        """What this search did, as panels a page draws (engine/protocol/panels.py), from
        its trace events of the ``presents`` kinds in emission order."""
        return []

    def __init__(self, ctx: SearchContext):
        self.ctx = ctx
        self.done = 0
        self.records: list = []
        # the step count asked for, said as such: "run budget reached" after 17k of 2M tokens
        # read as the token budget spent
        n = ctx.iterations
        self.stopped = (f"all {n} {self.unit}{'s' if n != 1 else ''} asked for done" if n else
                        f"it ran once; no further {self.unit} was asked for")

    # --- steps a search implements ----------------------------------------------------------
    @abstractmethod
    def begin(self) -> None:
        """The first evaluation (the initial probe, the tree's root)."""

    def stop_reason(self) -> str | None:
        """Why to stop before the next iteration, if the search's own criterion says so."""
        return None

    def adopt_edit(self, n: int, edit: HumanEdit) -> bool:
        """Adopt a person's edit at the start of iteration ``n``; True when that used up the
        iteration. A search that evolves programs, not workflows, adopts none."""
        return False

    def current_workflow(self) -> Workflow | None:
        return None

    def plan(self, n: int) -> list:
        """The moves of iteration ``n`` (JSON-able: they go into checkpoints)."""
        return [n]

    def concurrency(self, n: int) -> int:
        """How many of iteration ``n``'s moves may be proposed and probed at once (1: each is
        settled before the next is proposed)."""
        return 1

    def reserve(self, n: int, move: Any) -> Any:
        """What a move needs fixed before moves are proposed at once (called in move order, in
        the search's own thread); what it returns is handed to ``propose`` instead of the move."""
        return move

    @abstractmethod
    def propose(self, n: int, move: Any) -> Any | None: ...

    @abstractmethod
    def probe(self, n: int, candidate: Any) -> None: ...

    @abstractmethod
    def proposal(self, n: int, candidate: Any) -> Proposal | None:
        """The gate's question about ``candidate``; None when the search decides alone."""

    @abstractmethod
    def adopt(self, n: int, candidate: Any, decision: Decision | None) -> None: ...

    def finish_iteration(self, n: int) -> str | None:
        """After the iteration's moves; a reason to stop the search, or None."""
        return None

    @abstractmethod
    def snapshot(self) -> BaseModel:
        """The search's state, as its ``State`` model."""

    @abstractmethod
    def restore(self, state: BaseModel) -> None: ...

    @abstractmethod
    def pending_state(self, candidate: Any) -> dict:
        """A probed candidate, JSON-able, to ask the gate again after a resume."""

    @abstractmethod
    def pending_restore(self, state: dict) -> Any: ...

    @abstractmethod
    def outcome(self) -> SearchOutcome: ...

    # --- the loop ----------------------------------------------------------------------------
    def run(self, resume: dict | None = None) -> SearchOutcome:
        ctx = self.ctx
        in_progress: dict | None = None
        if resume and resume.get("n") is not None:
            saved = Checkpoint.model_validate(from_legacy(resume, self.name, self.State))
            if saved.name != self.name:
                raise ValueError(f"a {saved.name} checkpoint cannot resume a {self.name} search")
            self.restore(self.State.model_validate(saved.search))
            self.done = saved.n
            ctx.runner.count = saved.probes
            ctx.budget.restore(**saved.budget.model_dump())
            in_progress = saved.iteration.model_dump() if saved.iteration else None
        else:
            ctx.tracer.iteration = 0
            self.begin()
            self._checkpoint()
        try:
            while self.done < ctx.iterations:
                n = self.done + 1
                ctx.tracer.iteration = n
                if in_progress is not None:
                    moves, pending = list(in_progress["moves"]), in_progress.get("pending")
                    in_progress = None
                    if pending is not None and not self._decided(n, pending):
                        # A person who edited the workflow instead of deciding meant their version
                        # to go on: it replaces the question left pending (the gate closes it).
                        # A question they did decide is settled first, in the order it was asked:
                        # their edit then applies on top of it at the next iteration.
                        used = self._edit(n)
                        if used:
                            self.done = n
                            self._checkpoint()
                            continue
                        if used is not None:
                            moves, pending = self.plan(n), None
                else:
                    why = self.stop_reason()
                    if why:
                        self.stopped = why
                        break
                    ctx.control.check()
                    if self._edit(n):
                        self.done = n
                        self._checkpoint()
                        continue
                    moves, pending = self.plan(n), None
                    if not moves:
                        self.stopped = self.stop_reason() or "nothing left to expand"
                        break
                prepared: list | None = None  # candidates proposed and probed at once, in move order
                while moves or pending is not None:
                    if pending is not None:
                        candidate, pending = self.pending_restore(pending), None
                    else:
                        ctx.control.check()
                        if prepared is None and len(moves) > 1 and self.concurrency(n) > 1:
                            prepared = self._prepare(n, moves)
                        if prepared:
                            candidate = prepared.pop(0)
                            if isinstance(candidate, BaseException):
                                raise candidate  # as it would have been, at this move, one by one
                        else:
                            candidate = self.propose(n, moves[0])
                            if candidate is not None:
                                self.probe(n, candidate)
                    if candidate is not None:
                        self._settle(n, candidate, moves)
                    moves = moves[1:]
                    self._checkpoint(n, moves)
                stop = self.finish_iteration(n)
                self.done = n
                self._checkpoint()
                if stop:
                    self.stopped = stop
                    break
            else:
                self.stopped = self.stop_reason() or self.stopped
        except BudgetExhausted as exc:
            self.stopped = f"budget exhausted: {exc.reason}"
        return self.commit(self.outcome())

    def validations(self) -> list[dict]:
        """The in-loop validation of every candidate this search probed, from its folder (every
        attempt's, after a resume): the workflow probes' under probes/. A search whose candidates
        live elsewhere (the tree's nodes) says so itself."""
        out = []
        for summary in sorted(Path(self.ctx.runner.root).glob("*/summary.json")):
            try:
                saved = json.loads(summary.read_text())
            except (OSError, ValueError):
                continue  # a probe cut off before it finished validated nothing
            if saved.get("status") != "stopped" and isinstance(saved.get("metric"), dict):
                out.append(saved["metric"])
        return out

    def commit(self, outcome: SearchOutcome) -> SearchOutcome:
        """The final commitment, made honest for every search: when a trivial baseline beats every
        candidate on the search's own validation folds, the search says so on its console and in
        its final end, and hands the baseline in (its predictions on the test inputs) instead of
        a candidate that is worse than it; where the baseline's predictions cannot be made, the
        final stays and says it found nothing better."""
        ctx = self.ctx
        unbeaten = unbeaten_baseline(self.validations(), ctx.task.metric.higher_is_better)
        if unbeaten is None:
            return outcome
        if not unbeaten.beyond_noise:
            said = f"{unbeaten.describe()}; the search's own final stands"
            ctx.say(f"final commitment: {said}")
            return replace(outcome, unbeaten=unbeaten, final=replace(outcome.final, verdict=said))
        made = trivial_or_error(ctx.task)
        predictions = made.get(unbeaten.baseline) if isinstance(made, dict) else None
        said = unbeaten.describe()
        if predictions is None:
            why = made if isinstance(made, str) else "it has no predictions for the test inputs"
            said += f"; the search's own final stands, as the baseline could not be handed in ({why})"
            ctx.say(f"final commitment: {said}")
            return replace(outcome, unbeaten=unbeaten,
                           final=replace(outcome.final, verdict=said))
        name = unbeaten.baseline.replace("_", " ")
        said += f"; handed in the {name} baseline's predictions instead"
        ctx.say(f"final commitment: {said}")
        final = Endpoint(outcome.final.workflow, unbeaten.value, predictions=predictions,
                         baseline=unbeaten.baseline, verdict=said)
        return replace(outcome, final=final, unbeaten=unbeaten, searched=outcome.final)

    def _prepare(self, n: int, moves: list) -> list:
        """Propose and probe every move at once: the candidates (or what each raised) in move order."""
        reserved = [self.reserve(n, move) for move in moves]

        def one(move: Any) -> Any:
            try:
                candidate = self.propose(n, move)
                if candidate is not None:
                    self.probe(n, candidate)
                return candidate
            finally:
                for hook in THREAD_EXIT_HOOKS:
                    hook()

        width = min(self.concurrency(n), len(moves))
        with ThreadPoolExecutor(max_workers=width, thread_name_prefix=f"{self.name}-move") as pool:
            # each in a copy of this context: the trace and job host its training programs report to
            futures = [pool.submit(contextvars.copy_context().run, one, move) for move in reserved]
        out: list = []
        for future in futures:
            error = future.exception()
            out.append(error if error is not None else future.result())
        return out

    def _decided(self, n: int, pending: dict) -> bool:
        """Whether the gate already holds a decision on the candidate left pending."""
        proposal = self.proposal(n, self.pending_restore(pending))
        return proposal is None or self.ctx.gate.decision_made(proposal) is not None

    def _edit(self, n: int) -> bool | None:
        """Adopt a person's waiting edit, if any: None when there is none, else whether it used
        up the iteration. An edit written on a workflow the search has since moved on from has
        its change applied again on the current one; one that no longer applies is refused."""
        workflow = self.current_workflow()
        if workflow is None:
            return None
        while True:
            edit = self.ctx.gate.human_edit(workflow)
            if edit is None:
                return None
            rebased = rebase_edit(edit, workflow)
            if isinstance(rebased, HumanEdit):
                break
            # traced as the person's change, invalid now: where every refused proposal shows
            self.ctx.tracer.emit(MutationProposed(valid=False, mutation=edit_change(edit), problems=[rebased],
                                                  parent_hash=workflow.hash), edit.author)
            self.ctx.say(f"{self.unit} {n}: {edit.author}'s edit refused: {rebased}")
            self.ctx.gate.refused(edit, rebased)
        used = self.adopt_edit(n, rebased)
        self.ctx.gate.adopted(rebased, n)
        return used

    def _settle(self, n: int, candidate: Any, moves: list) -> None:
        """Ask the gate about a probed candidate, checkpointed first so the question survives
        the worker: AwaitingDecision leaves this method, and the run, right here."""
        proposal = self.proposal(n, candidate)
        decision = None
        if proposal is not None:
            self._checkpoint(n, moves, pending=self.pending_state(candidate))
            decision = self.ctx.gate.decide(proposal)
        self.adopt(n, candidate, decision)

    def _checkpoint(self, n: int | None = None, moves: list | None = None, pending: dict | None = None) -> None:
        """The state a resume starts from: after ``self.done`` iterations, plus (mid-iteration)
        the moves left and a candidate waiting for the gate."""
        if self.ctx.on_checkpoint is None:
            return
        state = Checkpoint(name=self.name, n=self.done, search=self.snapshot().model_dump(mode="json"),
                           probes=self.ctx.runner.count, budget=self.ctx.budget.usage_state(),
                           # mid-iteration (moves may be empty: only finish_iteration is left)
                           iteration=InProgress(n=n, moves=list(moves or []), pending=pending) if n is not None
                           else None)
        data = state.model_dump(mode="json", exclude_none=True)
        json.dumps(data)  # a checkpoint that cannot be stored must fail here, not in the studio
        self.ctx.on_checkpoint(data)
