import json
from dataclasses import replace
from pathlib import Path

import pytest

import engine.evaluation
import engine.runner
from engine.artifacts import ArtifactStore
from engine.budget import Budget
from engine.harness import CoordinationPolicy
from engine.mutations import Mutation
from engine.runner import RunResult
from engine.search.probe import Probe, ProbeRunner, search_gateway
from engine.search.scimars import (EDITORS, ReuseCache, check_proposal, editor_messages, scimars_search,
                                   selection_key)
from engine.synthesis import team_workflow
from engine.task import load_task
from engine.trace import ListSink, Tracer
from engine.workflow import Route

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def diabetes():
    return load_task(EXAMPLES / "diabetes-progression")


@pytest.fixture(scope="module")
def one_round(diabetes, tmp_path_factory):
    """One real SciMARS round on the diabetes example, with the official evaluator forbidden."""
    def forbidden(*a, **k):
        raise AssertionError("the search loop called the official evaluator")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(engine.evaluation, "evaluate_predictions", forbidden)
        mp.setattr(engine.runner, "evaluate_predictions", forbidden)
        budget = Budget(max_tokens=2_000_000)
        sink = ListSink()
        tracer = Tracer("scimars", [sink])
        runner = ProbeRunner(diabetes, budget, tmp_path_factory.mktemp("scimars") / "probes", seed=0)
        outcome = scimars_search(team_workflow(diabetes), runner, search_gateway(budget, tracer, 0), tracer, rounds=1)
    return outcome, sink.events, runner


def _calls(events, role):
    return [e for e in events if e.kind == "model_call" and e.payload["role"] == role]


# --- a full round ---------------------------------------------------------------------------------
def test_full_round_final_is_at_least_as_good_as_reference_by_public_checks(one_round, diabetes):
    outcome, events, runner = one_round
    assert len(outcome.iterations) == 1 and outcome.stopped == "round budget reached"
    rec = outcome.iterations[0]
    assert [p.editor for p in rec.proposals] == list(EDITORS)
    ref, final = rec.reference_run, outcome.final
    assert outcome.initial is ref
    hib = diabetes.metric.higher_is_better
    assert (final.all_checks_pass, final.checks_passed) >= (ref.all_checks_pass, ref.checks_passed)
    assert selection_key(final, hib) >= selection_key(ref, hib)
    assert rec.decision in {"keep", "adopt", "combine"}
    if rec.decision == "adopt":
        (editor,) = rec.chosen
        assert next(p for p in rec.proposals if p.editor == editor).supported
    # every valid proposal was probed in isolation against the reference, with the runner's one seed
    for p in rec.proposals:
        if p.valid:
            assert p.probe_run.workflow.parent_hash == ref.workflow.hash
            assert p.probe["validation"]["split"] == "validation"
    # no judge in SciMARS; one reflection; lessons recorded with numbers
    assert not _calls(events, "judge")
    assert len(_calls(events, "reflector")) == 1
    assert any(e.kind == "reflection" for e in events)
    assert rec.lessons and any(any(ch.isdigit() for ch in x) for x in rec.lessons)
    assert any(e.kind == "composition" and "decision" in e.payload for e in events)


def test_editors_are_independent(one_round):
    outcome, events, _ = one_round
    rec = outcome.iterations[0]
    prompts = {ed: _calls(events, ed) for ed in EDITORS}
    assert all(len(v) == 1 for v in prompts.values())
    users = {ed: next(m["content"] for m in v[0].payload["messages"] if m["role"] == "user") for ed, v in prompts.items()}
    assert len(set(users.values())) == 1  # same reference inputs for every editor
    for ed, calls in prompts.items():
        text = json.dumps(calls[0].payload["messages"])
        for other in rec.proposals:
            if other.editor != ed and other.mutation:
                assert json.dumps(other.mutation["params"]) not in text
                assert other.mutation["rationale"] not in text
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
    runner = ProbeRunner(diabetes, budget, tmp_path / "probes", seed=0)
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


# --- lessons and budget, on a fast stand-in runner -----------------------------------------------
class FakeRunner:
    """Stands in for ProbeRunner: scores a workflow from its planner prompt without running it."""

    def __init__(self, task, budget, root):
        self.task, self.budget, self.root, self.seed, self.count = task, budget, Path(root), 0, 0

    def run(self, workflow, label, iteration, judge_with=None):
        self.count += 1
        run_dir = self.root / f"{self.count:03d}-{label}"
        store = ArtifactStore(run_dir / "artifacts")
        preds = store.put_bytes(f"id,progression\n1,{self.count}\n".encode())
        value = 0.3 + 0.05 * len(workflow.agent("planner").prompt) / 80
        checks = [{"agent": "verifier", "name": "exit_ok", "passed": True, "detail": ""}]
        result = RunResult(f"fake-{self.count}", "completed", "", workflow.hash, {}, {}, {},
                           {"ok": True, "value": value, "split": "validation"}, "", 0, 0, 0, 0,
                           final_code=f"print({self.count})\n", predictions_sha256=preds)
        return Probe(workflow, result, [], checks, run_dir=run_dir)


def test_lessons_reach_the_next_rounds_editor_prompts(diabetes, tmp_path):
    budget = Budget(max_tokens=1_000_000)
    sink = ListSink()
    tracer = Tracer("lessons", [sink])
    runner = FakeRunner(diabetes, budget, tmp_path)
    outcome = scimars_search(team_workflow(diabetes), runner, search_gateway(budget, tracer, 0), tracer, rounds=2)
    assert len(outcome.iterations) == 2
    first_lessons = outcome.iterations[0].lessons
    assert first_lessons
    for ed in EDITORS:
        r1, r2 = _calls(sink.events, ed)
        sys1 = r1.payload["messages"][0]["content"]
        sys2 = r2.payload["messages"][0]["content"]
        assert "## Lessons from earlier runs" not in sys1
        assert "## Lessons from earlier runs" in sys2
        assert all(x in sys2 for x in first_lessons)
    # the prompt builder itself: lessons under their heading, nothing else from other editors
    msgs = editor_messages("role_editor", runner, outcome.iterations[0].reference_run, ["lesson A"])
    assert "## Lessons from earlier runs\n- lesson A" in msgs[0]["content"]


def test_budget_exhaustion_ends_the_search_cleanly(diabetes, tmp_path):
    budget = Budget(max_calls=2)
    tracer = Tracer("budget", [ListSink()])
    runner = FakeRunner(diabetes, budget, tmp_path)
    outcome = scimars_search(team_workflow(diabetes), runner, search_gateway(budget, tracer, 0), tracer, rounds=3)
    assert outcome.stopped.startswith("budget exhausted")
    assert outcome.final is not None and budget.used.calls <= 2


class _Veto:
    """A person who vetoes whatever the composer chose."""

    def __init__(self):
        self.proposals = []

    def decide(self, proposal):
        self.proposals.append(proposal)
        return False, "user:ada", "not convinced"

    def human_edit(self, incumbent):
        return None


def test_a_vetoed_composition_keeps_the_reference_and_a_resumed_search_skips_finished_rounds(diabetes, tmp_path):
    budget = Budget(max_tokens=2_000_000)
    tracer = Tracer("scimars", [ListSink()])
    runner = ProbeRunner(diabetes, budget, tmp_path / "probes", seed=0)
    gate, checkpoints = _Veto(), []
    initial = team_workflow(diabetes)
    outcome = scimars_search(initial, runner, search_gateway(budget, tracer, 0), tracer, rounds=1, gate=gate,
                             on_checkpoint=checkpoints.append)
    # The composer adopts a supported change on this task (see the test above); the person vetoes it.
    assert len(gate.proposals) == 1 and gate.proposals[0]["mutation"]["kind"].startswith("scimars_")
    assert gate.proposals[0]["workflow"]["hash"] != initial.hash
    assert outcome.iterations[0].decision == "keep" and outcome.final.workflow.hash == initial.hash
    assert [c["n"] for c in checkpoints] == [1]

    budget2 = Budget(max_tokens=2_000_000)
    tracer2 = Tracer("scimars", [ListSink()])
    runner2 = ProbeRunner(diabetes, budget2, tmp_path / "probes", seed=0)
    resumed = scimars_search(initial, runner2, search_gateway(budget2, tracer2, 0), tracer2, rounds=1,
                             resume=checkpoints[-1])
    assert resumed.iterations == [] and resumed.final.workflow.hash == initial.hash  # nothing left to run
    assert budget2.used.calls == budget.used.calls  # the spent budget carried over, nothing new spent
