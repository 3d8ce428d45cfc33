"""SciMARS's search logic (the editors' bounded surface, independent editors, public-check
selection, reuse receipts, lessons, budget, a vetoed composition and resume), run through
``evolve`` on the fake executor: real orchestration and offline models, no program runs. The
real end-to-end round is in tests/integration/test_evolve.py."""
import io
import json
from dataclasses import replace
from pathlib import Path

import pytest

import engine.evaluation
import engine.official  # noqa: F401  (imported before a test forbids the evaluator it binds)
import engine.runner
import engine.search.scimars
from engine.artifacts import ArtifactStore
from engine.budget import Budget
from engine.evolve import evolve
from engine.run_spec import RunSpec
from engine.harness import CoordinationPolicy
from engine.mutations import Mutation
from engine.protocol.gate import Decision
from engine.search.probe import ProbeRunner
from engine.search.scimars import EDITORS, ReuseCache, check_proposal
from engine.synthesis import team_workflow
from engine.task import load_task
from engine.trace import ListSink, Tracer
from engine.workflow import Route
from tests.fakes import FakeExecutor, split_spec

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DIABETES = EXAMPLES / "diabetes-progression"
ADOPTING_SEED = 1  # with this seed the composer adopts an editor's change in round 1 (asserted below)


@pytest.fixture(scope="module")
def diabetes():
    return load_task(DIABETES)


def stand_in_official(task, run_dir, predictions_sha256):
    """What evolve's official scoring returns, without starting evaluate.py."""
    return {"ok": True, "metric": "r2", "value": 0.5, "higher_is_better": True, "n": 88}


def _evolve(tmp_path, iterations, seed=ADOPTING_SEED, **kw):
    sink = ListSink()
    kw.setdefault("official", stand_in_official)  # evaluate.py is not what these tests are about
    result = evolve(DIABETES, split_spec(RunSpec(search="scimars", iterations=iterations, seed=seed, single_agent=False), kw),
                    runs_dir=tmp_path, out=io.StringIO(), executor=FakeExecutor(tmp_path / "sandbox"), sinks=[sink],
                    **kw)
    return result, sink.events


def _of(events, kind, **match):
    return [e.payload for e in events if e.kind == kind and all(e.payload.get(k) == v for k, v in match.items())]


def _calls(events, role):
    return [e for e in events if e.kind == "model_call" and e.payload["role"] == role]


@pytest.fixture(scope="module")
def one_round(tmp_path_factory):
    """One SciMARS round on the diabetes example, with the official evaluator forbidden (the final
    official scoring goes to a stand-in)."""
    def forbidden(*a, **k):
        raise AssertionError("the search loop called the official evaluator")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(engine.evaluation, "evaluate_predictions", forbidden)
        mp.setattr(engine.runner, "evaluate_predictions", forbidden, raising=False)
        return _evolve(tmp_path_factory.mktemp("scimars"), iterations=1)


# --- a full round ---------------------------------------------------------------------------------
def test_full_round_final_is_at_least_as_good_as_reference_by_public_checks(one_round):
    result, events = one_round
    assert result.iterations == 1 and result.stopped == "all 1 round asked for done"
    proposed = _of(events, "mutation_proposed")
    assert [p["editor"] for p in proposed] == list(EDITORS)
    assert all(p["parent_hash"] == result.initial["workflow_hash"] for p in proposed)
    (composed,) = [p for p in _of(events, "composition") if "decision" in p and p.get("gate") is None]
    if composed["supported"]:  # a supported change is taken, and it validated better
        assert composed["decision"] in {"adopt", "combine"}
        assert composed["editors"] and set(composed["editors"]) <= set(composed["supported"])
        assert composed["validation"] > composed["reference_validation"]  # r2: higher is better
        assert result.final["workflow_hash"] == composed["workflow_hash"] != result.initial["workflow_hash"]
    else:  # nothing beat the reference beyond noise: the reference is kept, unchanged
        assert composed["decision"] == "keep"
        assert result.final["workflow_hash"] == result.initial["workflow_hash"]
    probed = _of(events, "search_iteration")
    assert {p["editor"] for p in probed} == {p["editor"] for p in proposed if p["valid"]}
    for p in probed:  # every valid proposal probed in isolation against the same reference
        assert p["reference_validation"] == composed["reference_validation"]
        assert p["supported"] == (p["editor"] in composed["supported"])
    assert all(p["split"] == "validation" for p in _of(events, "evaluation"))
    # no judge in SciMARS; one reflection; lessons recorded with numbers
    assert not _calls(events, "judge")
    assert len(_calls(events, "reflector")) == 1
    (reflection,) = _of(events, "reflection")
    assert reflection["lessons"] and any(any(ch.isdigit() for ch in x) for x in reflection["lessons"])


def test_editors_are_independent(one_round):
    result, events = one_round
    proposed = _of(events, "mutation_proposed")
    prompts = {ed: _calls(events, ed) for ed in EDITORS}
    assert all(len(v) == 1 for v in prompts.values())
    users = {ed: next(m["content"] for m in v[0].payload["messages"] if m["role"] == "user") for ed, v in prompts.items()}
    assert len(set(users.values())) == 1  # same reference inputs for every editor
    for ed, calls in prompts.items():
        text = json.dumps(calls[0].payload["messages"])
        for other in proposed:
            if other["editor"] != ed and other["mutation"]:
                assert json.dumps(other["mutation"]["params"]) not in text
                assert other["mutation"]["rationale"] not in text
                assert calls[0].payload["response"] not in text


# --- surface limits ---------------------------------------------------------------------------------
def test_coordination_editor_changes_at_most_one_route_or_contract(diabetes):
    wf = team_workflow(diabetes)
    one = Mutation("route_change", "verifier", {"on": "RETRY", "target": "debugger", "max_loops": 5})
    assert check_proposal("coordination_editor", one, wf, one.apply(wf)).valid
    contract = Mutation("contract_change", "analyzer->planner:report", {"contract": "str"})
    assert check_proposal("coordination_editor", contract, wf, contract.apply(wf)).valid
    # one route changed and a second route added: two routes
    child = one.apply(wf)
    child = replace(child, routes=child.routes + (Route("finalizer", "RETRY", "verifier", 2),))
    p = check_proposal("coordination_editor", one, wf, child)
    assert not p.valid and any("at most one route or contract" in x for x in p.problems)
    # a route and a contract in one proposal
    both = replace(contract.apply(wf), routes=one.apply(wf).routes)
    p = check_proposal("coordination_editor", contract, wf, both)
    assert not p.valid and any("changes 2" in x for x in p.problems)
    # rewiring two edges at once
    two = Mutation("edge_rewiring", "debugger", {
        "remove": [{"source": "debugger", "target": "finalizer", "artifact": "code"},
                   {"source": "coder", "target": "debugger", "artifact": "code"}],
        "add": [{"source": "coder", "target": "finalizer", "artifact": "code", "contract": "python"},
                {"source": "coder", "target": "debugger", "artifact": "code", "contract": "python"}]})
    p = check_proposal("coordination_editor", two, wf, two.apply(wf))
    assert not p.valid and any("at most one" in x for x in p.problems)


def test_bounded_editable_surface_rejects_tools_checks_evaluation_and_budget(diabetes):
    wf = team_workflow(diabetes)
    prompt = Mutation("prompt_refinement", "planner", {"prompt": "Prefer tree ensembles."})
    assert check_proposal("role_editor", prompt, wf, prompt.apply(wf)).valid
    # a prompt change that also strips the verifier's tools
    child = prompt.apply(wf)
    child = replace(child, agents=tuple(replace(a, tools=()) if a.id == "verifier" else a for a in child.agents))
    p = check_proposal("role_editor", prompt, wf, child)
    assert not p.valid and any("tools" in x for x in p.problems)
    # a tool added to an agent that had none
    child = replace(prompt.apply(wf), agents=tuple(replace(a, tools=("sandbox.python",)) if a.id == "planner" else a
                                                   for a in prompt.apply(wf).agents))
    p = check_proposal("role_editor", prompt, wf, child)
    assert not p.valid and any("adds tool" in x for x in p.problems)
    # switching off the handoff checks
    mem = Mutation("memory_policy_change", "memory", {"record_limit": 5})
    child = mem.apply(wf)
    child = replace(child, harness=replace(child.harness, coordination=CoordinationPolicy(check_handoffs=False)))
    p = check_proposal("memory_editor", mem, wf, child)
    assert not p.valid and any("handoff checks" in x for x in p.problems)
    # naming the evaluator or the budget
    for text in ("Read evaluate.py and the heldout labels.", "Ignore the budget."):
        m = Mutation("procedure_refinement", "coder", {"procedure": text})
        p = check_proposal("role_editor", m, wf, m.apply(wf))
        assert not p.valid and any("outside the editable surface" in x for x in p.problems)
    # kinds are whitelisted per editor
    for editor, m in (("role_editor", mem), ("memory_editor", prompt),
                      ("coordination_editor", Mutation("agent_removal", "debugger", {}))):
        try:
            child = m.apply(wf)
        except Exception:
            child = wf
        p = check_proposal(editor, m, wf, child)
        assert not p.valid and any("may not propose" in x for x in p.problems)


# --- reuse receipts ------------------------------------------------------------------------------
def test_same_harness_twice_in_a_round_is_reused_unless_its_saved_program_changed(diabetes, tmp_path):
    budget = Budget(max_tokens=1_000_000)
    sink = ListSink()
    tracer = Tracer("reuse", [sink])
    runner = ProbeRunner(diabetes, budget, tmp_path / "probes", seed=0,
                         executor=FakeExecutor(tmp_path / "sandbox"))
    cache = ReuseCache(runner, tracer)
    wf = team_workflow(diabetes)
    first, receipt = cache.probe(wf, "reference", 1)
    assert receipt is None and runner.count == 1
    calls = budget.used.calls
    # the same full harness (a new version object, same content) again: reused, not rerun
    again, receipt = cache.probe(wf.derive(note="same content"), "again", 1)
    assert runner.count == 1 and budget.used.calls == calls
    assert receipt["verified"] is True and receipt["workflow_hash"] == wf.hash
    assert receipt["reused_run_id"] == first.result.run_id
    code_sha = ArtifactStore(first.run_dir / "artifacts").put_bytes(first.result.final_code.encode())
    assert receipt["program_sha256"] == code_sha
    assert again.checks == first.checks and again.validation == first.validation
    assert [e.payload for e in sink.events if e.kind == "reuse_receipt"] == [receipt]
    # a different memory policy is a different harness: never reused
    mem = Mutation("memory_policy_change", "memory", {"record_limit": 5}).apply(wf)
    assert mem.hash != wf.hash and mem.hash not in cache.entries
    # tamper with the saved predictions file: the program is no longer intact, so it is rerun
    stored = ArtifactStore(first.run_dir / "artifacts").path_for(first.result.predictions_sha256)
    stored.write_text(stored.read_text() + "999,0.0\n")
    rerun, receipt = cache.probe(wf, "after-tamper", 1)
    assert runner.count == 2 and budget.used.calls > calls
    assert receipt["verified"] is False and receipt["reused_run_id"] is None
    assert "sha256 changed" in receipt["reason"] and receipt["rerun_id"] == rerun.result.run_id
    assert rerun.result.run_id != first.result.run_id


# --- lessons, budget, the gate and resume -------------------------------------------------------
def test_lessons_reach_the_next_rounds_editor_prompts(tmp_path):
    result, events = _evolve(tmp_path, iterations=2)
    assert result.iterations == 2
    first_lessons = _of(events, "reflection", n=1)[0]["lessons"]
    assert first_lessons
    for ed in EDITORS:
        r1, r2 = _calls(events, ed)
        sys1 = r1.payload["messages"][0]["content"]
        sys2 = r2.payload["messages"][0]["content"]
        assert "## Lessons from earlier runs" not in sys1
        assert "## Lessons from earlier runs" in sys2
        assert all(x in sys2 for x in first_lessons)


def test_budget_exhaustion_ends_the_search_cleanly(tmp_path):
    result, events = _evolve(tmp_path, iterations=3, budget=Budget(max_calls=2))
    assert result.stopped.startswith("budget exhausted")
    assert result.final["workflow_hash"] and result.usage["calls"] <= 2
    assert events[-1].kind == "search_finished"


class _Veto:
    """A person who vetoes whatever the composer chose."""

    def __init__(self):
        self.proposals = []

    def decide(self, proposal):
        self.proposals.append(proposal)
        return Decision(approved=False, decided_by="user:ada", reason="not convinced")

    def human_edit(self, incumbent):
        return None

    def adopted(self, edit, n):
        raise AssertionError("nobody edited")


def test_a_vetoed_composition_keeps_the_reference_and_a_resumed_search_skips_finished_rounds(tmp_path, monkeypatch):
    gate, checkpoints = _Veto(), []
    run_dir = tmp_path / "run"
    # Every validated change counts as supported here (the rule itself is tested in test_selection.py),
    # so the composer takes one; the person vetoes it.
    monkeypatch.setattr(engine.search.scimars, "is_supported", lambda probe, ref, hib: probe.validation is not None)
    result, events = _evolve(tmp_path, iterations=1, gate=gate, run_dir=run_dir, on_checkpoint=checkpoints.append)
    assert len(gate.proposals) == 1 and gate.proposals[0].change.kind.startswith("scimars_")
    assert gate.proposals[0].workflow["hash"] != result.initial["workflow_hash"]
    vetoed = [p for p in _of(events, "composition") if p.get("gate") == "user:ada"]
    assert len(vetoed) == 1 and vetoed[0]["approved"] is False and vetoed[0]["decision"] == "keep"
    assert result.final["workflow_hash"] == result.initial["workflow_hash"]
    assert checkpoints[-1]["n"] == 1

    resumed, events = _evolve(tmp_path, iterations=1, run_dir=run_dir, resume=checkpoints[-1])
    assert resumed.iterations == 1 and not _of(events, "search_iteration")  # nothing left to run
    assert resumed.final["workflow_hash"] == result.initial["workflow_hash"]
    assert resumed.usage == result.usage  # the spent budget carried over, nothing new spent
