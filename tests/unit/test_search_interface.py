"""The one search interface (engine/search/base.py): every registered search checkpoints
after each step, resumes from any checkpoint exactly there, and suspends at a proposal when
the gate has no decision yet, resuming at that proposal without probing it again."""
from __future__ import annotations

import io

import pytest

from engine.errors import AwaitingDecision
from engine.evolve import evolve
from engine.run_spec import RunSpec
from engine.protocol.checkpoints import Checkpoint
from engine.protocol.gate import Decision, Proposal
from engine.search.base import AutoGate
from engine.search.registry import SEARCHES, choices, search_class
from engine.trace import ListSink
from tests.fakes import FakeExecutor, split_spec


def _official(task, run_dir, predictions_sha256):
    return {"ok": True, "metric": task.metric.name, "value": 0.0, "higher_is_better": task.metric.higher_is_better}


def _evolve(tmp_path, examples, search, **kw):
    sink = ListSink()
    result = evolve(examples / "discontinuous-1d", split_spec(RunSpec(search=search, single_agent=False), kw),
                    runs_dir=tmp_path / "runs", out=io.StringIO(), executor=FakeExecutor(tmp_path / "sandbox"),
                    official=_official, sinks=[sink], **kw)
    return result, sink.events


class WaitOnce(AutoGate):
    """A person who has not decided the first proposal yet; once they have, they approve it."""

    def __init__(self, decided: dict):
        self.decided = decided
        self.asked: list[Proposal] = []

    def decide(self, proposal: Proposal) -> Decision:
        self.asked.append(proposal)
        if proposal.key not in self.decided:
            if self.decided:  # only the first proposal waits for the person
                return Decision.by_rule(proposal)
            self.decided[proposal.key] = None
            raise AwaitingDecision(proposal.n, proposal.key)
        return Decision(approved=True, decided_by="user:ada", reason="after a night's sleep", promote=True)

    def decision_made(self, proposal: Proposal) -> Decision | None:
        if self.decided.get(proposal.key) is None:
            return None
        return Decision(approved=True, decided_by="user:ada", reason="after a night's sleep", promote=True)


def test_the_registry_is_the_one_list_of_searches():
    assert SEARCHES == ("mimosa", "scimars", "tree", "memory-fixed", "fixed", "repair")
    assert [name for name, _ in choices()] == list(SEARCHES)
    with pytest.raises(ValueError, match="unknown search 'annealing'"):
        search_class("annealing")


@pytest.mark.parametrize("search", SEARCHES)
def test_every_search_resumes_from_a_mid_run_checkpoint_without_redoing_a_step(tmp_path, examples, search):
    checkpoints: list[dict] = []
    whole, _ = _evolve(tmp_path / "whole", examples, search, iterations=2, seed=3, on_checkpoint=checkpoints.append)
    for cp in checkpoints:
        Checkpoint.model_validate(cp)  # every checkpoint is the typed model
    after_one = next(cp for cp in checkpoints if cp["n"] == 1 and "iteration" not in cp)
    resumed, events = _evolve(tmp_path / "whole", examples, search, iterations=2, seed=3, resume=after_one,
                              run_dir=whole.run_dir)
    started = [e for e in events if e.kind == "search_started"]
    assert [e.payload["resumed_after"] for e in started] == [1]
    assert resumed.iterations == whole.iterations == 2
    # Nothing of iteration 1 ran again: the resumed attempt's probes and nodes are all iteration 2's.
    assert {e.iteration for e in events if e.kind in ("run_started", "tree_node")} == {2}


@pytest.mark.parametrize("search", [s for s in SEARCHES if search_class(s).asks_gate])
def test_a_proposal_without_a_decision_suspends_and_the_decision_resumes_right_there(tmp_path, examples, search):
    # A SciMARS round asks the gate only when its composer chose a change; some seeds keep all.
    for seed in range(8):
        checkpoints: list[dict] = []
        decided: dict = {}
        gate = WaitOnce(decided)
        try:
            _evolve(tmp_path / str(seed), examples, search, iterations=2, seed=seed, gate=gate,
                    on_checkpoint=checkpoints.append)
        except AwaitingDecision as exc:
            waiting = exc
            break
    else:
        pytest.fail(f"no {search} run of 8 seeds brought a proposal to the gate")
    tmp_path = tmp_path / str(seed)
    pending = checkpoints[-1]
    assert pending["iteration"]["pending"] is not None and pending["iteration"]["n"] == waiting.n
    first_question = gate.asked[-1]

    decided[waiting.key] = "approved"
    run_dir = next((tmp_path / "runs").iterdir())
    result, events = _evolve(tmp_path, examples, search, iterations=2, seed=seed, gate=gate, resume=pending,
                             run_dir=run_dir)
    # The same question was asked again, answered from the stored decision, and not probed again.
    again = [p for p in gate.asked if p.key == first_question.key]
    assert len(again) == 2 and again[1] == first_question
    probed_again = [e for e in events if e.kind in ("run_started", "tree_node") and e.iteration == waiting.n
                    and e.payload.get("node", e.payload.get("workflow_hash")) == first_question.key]
    assert probed_again == [] or search == "tree"  # a tree node is recorded (not rebuilt) once decided
    assert result.iterations == 2
    if search == "tree":
        node = next(e for e in events if e.kind == "tree_node" and e.payload["node"] == first_question.key)
        assert node.payload["promoted"] and node.payload["decided_by"] == "user:ada"
        started = [e.payload for e in events if e.kind == "search_iteration" and e.payload.get("phase") == "started"]
        assert first_question.key in started[-1]["parents"]  # the promoted child is expanded next
    else:
        accepted = [e.payload for e in events if e.kind in ("search_iteration", "composition")
                    and e.payload.get("decided_by", e.payload.get("gate")) == "user:ada"]
        assert accepted, "the person's decision was applied"


class EditsInstead(WaitOnce):
    """A person who, instead of deciding the waiting proposal, writes their own version."""

    def __init__(self, decided: dict):
        super().__init__(decided)
        self.edit = None
        self.adopted_in: list[int] = []

    def human_edit(self, incumbent):
        edit, self.edit = self.edit, None
        return edit

    def adopted(self, edit, n: int) -> None:
        self.adopted_in.append(n)


def test_a_persons_edit_replaces_the_question_left_waiting(tmp_path, examples):
    from engine.search.base import HumanEdit
    from engine.workflow import Workflow

    checkpoints: list[dict] = []
    gate = EditsInstead({})
    with pytest.raises(AwaitingDecision) as waiting:
        _evolve(tmp_path, examples, "mimosa", iterations=2, seed=4, gate=gate, on_checkpoint=checkpoints.append)
    pending = checkpoints[-1]
    asked = len(gate.asked)
    start = Workflow.from_dict({**pending["start"]["workflow"], "hash": None})
    mine = Workflow.from_dict({**start.to_dict(), "hash": None, "note": "my own procedure",
                               "harness": {**start.to_dict()["harness"],
                                           "procedures": {**start.harness.procedures, "planner": "Fit a line first."}}})
    gate.edit = HumanEdit(mine, "user:grace")
    run_dir = next((tmp_path / "runs").iterdir())
    result, events = _evolve(tmp_path, examples, "mimosa", iterations=2, seed=4, gate=gate, resume=pending,
                             run_dir=run_dir)
    # The waiting proposal was not asked about again: the person's version took its iteration.
    assert all(p.key != waiting.value.key for p in gate.asked[asked:])
    assert gate.adopted_in == [waiting.value.n]
    edits = [e.payload for e in events if e.kind == "search_iteration" and e.payload["decided_by"] == "user:grace"]
    assert [e["n"] for e in edits] == [waiting.value.n] and edits[0]["workflow_hash"] == mine.hash
    assert result.iterations == 2


class EditsThenApproves(EditsInstead):
    """A person who writes their own version while a proposal waits, then approves the proposal."""

    def __init__(self, decided: dict):
        super().__init__(decided)
        self.refusals: list[str] = []
        self.adopted_workflows: list = []

    def adopted(self, edit, n: int) -> None:
        super().adopted(edit, n)
        self.adopted_workflows.append(edit.workflow)

    def refused(self, edit, reason: str) -> None:
        self.refusals.append(reason)


def _waiting_mimosa(tmp_path, examples, gate, iterations: int = 3):
    checkpoints: list[dict] = []
    with pytest.raises(AwaitingDecision) as waiting:
        _evolve(tmp_path, examples, "mimosa", iterations=iterations, seed=4, gate=gate,
                on_checkpoint=checkpoints.append)
    return waiting.value, checkpoints[-1]


def test_an_approval_given_after_an_edit_is_applied_and_the_edit_then_applies_on_top_of_it(tmp_path, examples):
    from engine.mutations import Mutation
    from engine.search.base import HumanEdit
    from engine.workflow import Workflow

    gate = EditsThenApproves({})
    waiting, pending = _waiting_mimosa(tmp_path, examples, gate)
    incumbent = Workflow.from_dict({**pending["search"]["incumbent_workflow"], "hash": None})
    change = Mutation("procedure_refinement", "planner", {"procedure": "Fit a line first."}, "my prior",
                      author="user:grace")
    mine = change.apply(incumbent)
    gate.edit = HumanEdit(mine, "user:grace", change=change, base=incumbent.hash)
    gate.decided[waiting.key] = "approved"  # after the edit was saved
    run_dir = next((tmp_path / "runs").iterdir())
    result, events = _evolve(tmp_path, examples, "mimosa", iterations=3, seed=4, gate=gate, resume=pending,
                             run_dir=run_dir)
    iterations = [e.payload for e in events if e.kind == "search_iteration"]
    # The approval is applied, in its own iteration, to the workflow it was asked about ...
    approved = next(p for p in iterations if p["n"] == waiting.n)
    assert approved["accepted"] and approved["decided_by"] == "user:ada" and approved["workflow_hash"] == waiting.key
    # ... and the person's change then goes on top of it: both are in the workflow adopted next.
    approved_workflow = Workflow.from_dict({**approved["workflow"], "hash": None})
    both = change.apply(approved_workflow)
    assert gate.adopted_in == [waiting.n + 1] and [w.hash for w in gate.adopted_workflows] == [both.hash]
    edit = next(p for p in iterations if p["decided_by"] == "user:grace")
    assert edit["n"] == waiting.n + 1 and edit["workflow_hash"] == both.hash != mine.hash
    assert both.harness.procedures["planner"] == "Fit a line first."
    # the approved change is never proposed again: it is part of the incumbent now
    assert [p for p in gate.asked if p.key == waiting.key and p.n != waiting.n] == []
    assert gate.refusals == [] and result.iterations == 3


def test_an_edit_that_no_longer_applies_is_refused_with_its_reason_and_the_search_goes_on(tmp_path, examples):
    from engine.mutations import Mutation
    from engine.search.base import HumanEdit
    from engine.workflow import Workflow

    gate = EditsThenApproves({})
    waiting, pending = _waiting_mimosa(tmp_path, examples, gate)
    incumbent = Workflow.from_dict({**pending["search"]["incumbent_workflow"], "hash": None})
    # written on a version where a role "statistician" existed; the current workflow has none
    change = Mutation("procedure_refinement", "statistician", {"procedure": "Bootstrap everything."}, "",
                      author="user:grace")
    gate.edit = HumanEdit(incumbent, "user:grace", change=change, base="0" * 64)
    gate.decided[waiting.key] = "approved"
    run_dir = next((tmp_path / "runs").iterdir())
    result, events = _evolve(tmp_path, examples, "mimosa", iterations=3, seed=4, gate=gate, resume=pending,
                             run_dir=run_dir)
    assert len(gate.refusals) == 1 and "statistician" in gate.refusals[0]
    refused = [e.payload for e in events if e.kind == "mutation_proposed" and e.agent == "user:grace"]
    assert len(refused) == 1 and not refused[0]["valid"] and refused[0]["problems"] == gate.refusals
    assert gate.adopted_in == [] and result.iterations == 3
    # the iteration the refused edit would have used proposes as usual
    assert any(e.kind == "mutation_proposed" and e.agent == "mutator" and e.iteration == waiting.n + 1
               for e in events)
