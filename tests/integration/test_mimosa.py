import ast
from pathlib import Path

import pytest

import engine.evaluation
import engine.runner
from engine.budget import Budget
from engine.search.mimosa import accepts, mimosa_search
from engine.search.probe import ProbeRunner, search_gateway
from engine.synthesis import team_workflow
from engine.task import load_task
from engine.trace import ListSink, Tracer, read_events

SEARCH = Path(__file__).resolve().parents[2] / "engine" / "search"


def test_accept_rule_is_strict_improvement_and_never_a_failed_judgement():
    assert accepts(0.81, 0.80)
    assert not accepts(0.80, 0.80)
    assert not accepts(0.79, 0.80)
    assert not accepts(None, 0.2)
    assert accepts(0.1, None)  # anything judged beats an incumbent whose judgement failed


def _search(task, tmp_path, iterations, stop_j, seed=2, budget=None):
    budget = budget or Budget(max_tokens=1_000_000)
    sink = ListSink()
    tracer = Tracer("search", [sink])
    runner = ProbeRunner(task, budget, tmp_path / "probes", seed=seed)
    outcome = mimosa_search(team_workflow(task), runner, search_gateway(budget, tracer, seed), tracer,
                            iterations=iterations, stop_j=stop_j)
    return outcome, sink.events, budget


@pytest.fixture
def diabetes(examples):
    return load_task(examples / "diabetes-progression")


@pytest.fixture
def no_official_evaluator(monkeypatch):
    def forbidden(*a, **k):
        raise AssertionError("the search loop called the official evaluator")

    monkeypatch.setattr(engine.evaluation, "evaluate_predictions", forbidden)
    monkeypatch.setattr(engine.runner, "evaluate_predictions", forbidden)


def test_search_keeps_only_strict_improvements_and_never_touches_the_official_evaluator(
        diabetes, tmp_path, no_official_evaluator):
    outcome, events, budget = _search(diabetes, tmp_path, iterations=3, stop_j=1.0)
    assert len(outcome.iterations) == 3
    j = outcome.initial.judgement.J
    for r in outcome.iterations:
        if r.valid:
            assert r.incumbent_J == pytest.approx(j)
            assert r.accepted == (r.J is not None and r.J > j)
            if r.accepted:
                j = r.J
    assert outcome.final.judgement.J == pytest.approx(j)
    assert all(e.payload.get("evaluator") != "evaluate.py" for e in events)
    # every probe scored itself on the validation split of the training data
    for r in outcome.iterations:
        if r.probe:
            assert r.probe["validation"]["split"] == "validation"


def test_search_stops_as_soon_as_J_exceeds_the_threshold(diabetes, tmp_path, no_official_evaluator):
    outcome, events, _ = _search(diabetes, tmp_path, iterations=5, stop_j=0.3)
    assert outcome.iterations == [] and "> 0.3" in outcome.stopped
    assert outcome.final is outcome.initial


def test_every_model_call_draws_from_one_budget_visible_in_the_traces(diabetes, tmp_path):
    outcome, events, budget = _search(diabetes, tmp_path, iterations=1, stop_j=1.0)
    calls = [e for e in events if e.kind == "model_call"]
    for trace in (tmp_path / "probes").glob("*/trace.jsonl"):
        calls += [e for e in read_events(trace) if e.kind == "model_call"]
    purposes = {e.payload["purpose"] for e in calls}
    assert {"role", "judge", "mutation"} <= purposes
    assert sum(e.payload["prompt_tokens"] + e.payload["completion_tokens"] for e in calls) == budget.used.tokens
    used = sorted(e.payload["budget_used"]["tokens"] for e in calls)
    assert used[-1] == budget.used.tokens


def test_budget_exhaustion_ends_the_search_cleanly(diabetes, tmp_path):
    outcome, events, budget = _search(diabetes, tmp_path, iterations=5, stop_j=1.0,
                                      budget=Budget(max_tokens=60_000))
    assert "budget" in outcome.stopped
    assert budget.used.tokens <= 60_000


def test_no_search_module_can_import_the_official_evaluator():
    for path in SEARCH.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names = [a.name for a in node.names] if isinstance(node, ast.ImportFrom) else []
            for m in mods:
                assert not m.endswith(("official", "evaluation")), f"{path.name} imports {m}"
            assert "official_metric" not in names and "evaluate_predictions" not in names, path.name


def test_a_search_resumed_from_its_checkpoint_continues_after_the_last_finished_iteration(diabetes, tmp_path):
    checkpoints = []
    budget = Budget(max_tokens=1_000_000)
    tracer = Tracer("search", [ListSink()])
    runner = ProbeRunner(diabetes, budget, tmp_path / "probes", seed=2)
    first = mimosa_search(team_workflow(diabetes), runner, search_gateway(budget, tracer, 2), tracer,
                          iterations=1, stop_j=1.0, on_checkpoint=checkpoints.append)
    assert [c["n"] for c in checkpoints] == [0, 1]
    state = checkpoints[-1]

    # A fresh process: new budget, runner and tracer; only the checkpoint survives.
    budget2 = Budget(max_tokens=1_000_000)
    sink = ListSink()
    tracer2 = Tracer("search", [sink])
    runner2 = ProbeRunner(diabetes, budget2, tmp_path / "probes", seed=2)
    resumed = mimosa_search(team_workflow(diabetes), runner2, search_gateway(budget2, tracer2, 2), tracer2,
                            iterations=2, stop_j=1.0, resume=state)
    assert [r.n for r in resumed.iterations] == [2]  # iteration 1 is not run again
    assert resumed.initial.workflow.hash == first.initial.workflow.hash
    assert resumed.initial.judgement.J == first.initial.judgement.J
    assert budget2.used.calls > state["budget"]["used"]["calls"]  # the same budget, carried over
    assert not any(e.kind == "run_started" and e.payload.get("workflow_hash") == first.initial.workflow.hash
                   and e.iteration == 0 for e in sink.events)  # the initial workflow was not re-probed


class _PersonEdits:
    """A gate whose person vetoes every mutation and edits the planner's procedure once."""

    def __init__(self):
        self.offered = False

    def decide(self, proposal):
        return False, "user:ada", "vetoed"

    def human_edit(self, incumbent):
        if self.offered:
            return None
        self.offered = True
        from engine.mutations import Mutation

        edit = Mutation("procedure_refinement", "planner", {"procedure": "Use ridge regression only."},
                        "a person's prior", author="user:ada")
        return edit.apply(incumbent), "user:ada"


def test_a_persons_edit_is_adopted_and_their_vetoes_stand(diabetes, tmp_path):
    budget = Budget(max_tokens=1_000_000)
    sink = ListSink()
    tracer = Tracer("search", [sink])
    runner = ProbeRunner(diabetes, budget, tmp_path / "probes", seed=2)
    outcome = mimosa_search(team_workflow(diabetes), runner, search_gateway(budget, tracer, 2), tracer,
                            iterations=2, stop_j=1.0, gate=_PersonEdits())
    edit, vetoed = outcome.iterations
    assert edit.mutation["kind"] == "human_edit" and edit.accepted and edit.decided_by == "user:ada"
    assert outcome.final.workflow.harness.procedures["planner"] == "Use ridge regression only."
    assert vetoed.mutation["kind"] != "human_edit" and not vetoed.accepted and vetoed.decided_by == "user:ada"
    assert edit.J is not None  # probed and judged like any candidate, so its evidence is on record
