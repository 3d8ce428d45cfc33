"""The offline mutator reads the judge's scores and the failed public checks, proposes the change
that addresses the weakest criterion and says which; it never repeats what the history shows.

Prompts are built by Mimosa's own ``mutator_messages`` from generated task folders; nothing runs
in a sandbox."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from engine.judge import CRITERIA, Judgement
from engine.mutations import Mutation
from engine.offline import scientist
from engine.offline.mutator import read_standings
from engine.offline.reading import libraries_allowed, read_facts, tags_asked
from engine.prompt_format import extract_json, reading_view
from engine.search.mimosa import mutator_messages
from engine.synthesis import team_workflow
from engine.task import load_task

STACK = "Use only Python with numpy, scipy, pandas and scikit-learn."


def make_task(folder: Path, *, goal: str = "Predict `y` for every test row.", context: str = "Measured in a lab.",
              requirements: tuple[str, ...] = ("CPU only.", STACK), kind: str = "regression") -> Path:
    rng = np.random.default_rng(0)
    x = rng.uniform(0.1, 1.0, size=(40, 2))
    y = (x[:, 0] > 0.5).astype(int) if kind == "classification" else 2.0 * np.sqrt(x[:, 0]) + x[:, 1]
    train = pd.DataFrame({"a": x[:, 0], "b": x[:, 1], "y": y})
    test = pd.DataFrame({"id": range(10), "a": rng.uniform(0.1, 1.0, 10), "b": rng.uniform(0.1, 1.0, 10)})
    (folder / "data").mkdir(parents=True, exist_ok=True)
    train.to_csv(folder / "data" / "train.csv", index=False)
    test.to_csv(folder / "data" / "test_features.csv", index=False)
    (folder / "Problem.md").write_text(f"# A task\n\n## Goal\n{goal}\n\n## Context\n{context}\n")
    (folder / "Requirements.md").write_text("".join(f"- {r}\n" for r in requirements))
    metric = "accuracy\ndirection: higher is better" if kind == "classification" else "rmse\ndirection: lower is better"
    (folder / "Evaluation.md").write_text(f"# Evaluation\n\n## Metric\nname: {metric}\n")
    (folder / "evaluate.py").write_text("print('{}')\n")
    (folder / "Data_config.json").write_text(json.dumps({
        "files": {"train": "data/train.csv", "test_features": "data/test_features.csv"},
        "target": "y", "id_column": "id", "features": ["a", "b"], "kind": kind,
        "predictions": {"file": "predictions.csv",
                        "columns": {"id": "int", "y": "int" if kind == "classification" else "float"}}}))
    return folder


@pytest.fixture
def task_dir(tmp_path):
    return make_task(tmp_path / "task")


def scores(**given: float) -> dict[str, float]:
    """Every criterion at 0.9 but those given."""
    return {c: given.get(c, 0.9) for c in CRITERIA}


def messages(task_dir: Path, judged: dict[str, float] | None, *, checks: list[dict] | None = None,
             history: list[str] | None = None, workflow=None, report: str = "", approach: str = "") -> list[dict]:
    """The mutator's prompt as Mimosa builds it for an incumbent with these scores and checks."""
    task = load_task(task_dir)
    workflow = workflow or team_workflow(task)
    judgement = Judgement(ok=True, scores=judged, feedback={c: f"feedback on {c}" for c in judged}, attempts=1) \
        if judged is not None else Judgement(ok=False, error="the judge answered no JSON")
    incumbent = SimpleNamespace(workflow=workflow, judgement=judgement, report=lambda: report, approach=lambda: approach,
                                checks=checks if checks is not None else [
                                    {"name": "exit_ok", "passed": True, "detail": "exit 0"},
                                    {"name": "finite", "passed": True, "detail": "all finite"}])
    return mutator_messages(SimpleNamespace(task=task), incumbent, history or [])


def propose(task_dir: Path, judged: dict[str, float] | None, seed: int = 0, **kw) -> dict:
    msgs = messages(task_dir, judged, **kw)
    mutation = extract_json(scientist.respond(msgs, seed=seed))
    assert isinstance(mutation, dict), mutation
    # Every proposal is a valid change of the incumbent workflow.
    workflow = kw.get("workflow") or team_workflow(load_task(task_dir))
    Mutation.from_dict(mutation).apply(workflow)
    return mutation


def history_line(mutation: dict) -> str:
    """How Mimosa records a probed proposal."""
    return f"{json.dumps(mutation, sort_keys=True)} -> J 0.600 vs 0.700: rejected"


# --- the weakest criterion decides ----------------------------------------------------------------------
def test_the_weakest_criterion_decides_the_change_and_is_named_with_its_score(task_dir):
    quality = propose(task_dir, scores(output_quality=0.31))
    efficiency = propose(task_dir, scores(collaboration_efficiency=0.42))
    goal = propose(task_dir, scores(goal_alignment=0.05))
    assert quality["rationale"].startswith("addresses output_quality (0.31, the weakest criterion): ")
    assert efficiency["rationale"].startswith("addresses collaboration_efficiency (0.42, the weakest criterion): ")
    assert goal["rationale"].startswith("addresses goal_alignment (0.05, the weakest criterion): ")
    # Quality is a modelling change for the planner; the others change how the team works.
    assert (quality["kind"], quality["target"]) == ("prompt_refinement", "planner")
    assert (efficiency["kind"], efficiency["target"]) != (quality["kind"], quality["target"])
    assert efficiency["target"] in {"debugger", "verifier", "memory"} or efficiency["kind"] == "agent_removal"
    assert (goal["kind"], goal["target"]) == ("procedure_refinement", "coder")
    assert "predictions file" in goal["params"]["procedure"]


def test_ties_are_broken_by_a_fixed_order_and_said(task_dir):
    mutation = propose(task_dir, scores(output_quality=0.5, collaboration_efficiency=0.5))
    assert mutation["rationale"].startswith("addresses output_quality (0.50, the weakest criterion, tied with "
                                            "collaboration_efficiency): ")
    assert read_standings("- output_quality: 0.5 \u2014 x\n- goal_alignment: 0.5 \u2014 y")[0].criterion == \
        "goal_alignment"


def test_a_modelling_change_is_grounded_in_the_task_facts(tmp_path):
    law = make_task(tmp_path / "law", goal="Predict `y` for inputs beyond the training range; extrapolation is "
                                           "required.", context="Known physics is welcome.")
    mutation = propose(law, scores(output_quality=0.2))
    asked = tags_asked(mutation["params"]["prompt"])
    assert asked & {"parametric", "physics", "extrapolation"}
    assert "must extrapolate" in mutation["rationale"] and "physics" in mutation["rationale"]
    # The task allows only the scientific stack, so no symbolic regression (it needs pyoperon) ...
    assert "symbolic" not in asked
    # ... which a task that allows it gets first.
    open_law = make_task(tmp_path / "open", goal="Predict `y` for inputs beyond the training range; extrapolation "
                                                 "is required.", context="Known physics is welcome.",
                         requirements=("CPU only.", "Use only numpy, scipy, pandas, scikit-learn and pyoperon."))
    assert "symbolic" in tags_asked(propose(open_law, scores(output_quality=0.2))["params"]["prompt"])
    # A classification task gets a classifier, never a regression law.
    labels = make_task(tmp_path / "labels", kind="classification")
    assert "classifier" in tags_asked(propose(labels, scores(output_quality=0.2))["params"]["prompt"])


# --- failed checks ------------------------------------------------------------------------------------------
def failing(name: str, detail: str) -> list[dict]:
    return [{"name": "exit_ok", "passed": True, "detail": "exit 0"}, {"name": name, "passed": False, "detail": detail}]


def test_a_failed_within_range_check_asks_the_planner_for_an_extrapolation_safe_model(task_dir):
    mutation = propose(task_dir, scores(answer_plausibility=0.5),
                       checks=failing("within_range", "12 of 40 predictions above 9.3 (highest 4.1e+04)"))
    assert (mutation["kind"], mutation["target"]) == ("prompt_refinement", "planner")
    assert {"extrapolation", "parametric"} <= tags_asked(mutation["params"]["prompt"])
    assert mutation["rationale"].startswith("addresses answer_plausibility (0.50, the weakest criterion): "
                                            "the within_range check failed (12 of 40 predictions above 9.3")


def test_each_failed_check_gets_its_own_remedy(task_dir):
    finite = propose(task_dir, scores(answer_plausibility=0.5), checks=failing("finite", "3 of 40 are not finite"))
    claims = propose(task_dir, scores(answer_plausibility=0.5),
                     checks=failing("claims_match", "the final report states 'r2 = 0.99' but measured r2: 0.41"))
    assert (finite["kind"], finite["target"]) == ("procedure_refinement", "coder")
    assert "NaN and inf" in finite["params"]["procedure"]
    assert (claims["kind"], claims["target"]) == ("procedure_refinement", "finalizer")
    assert "measured" in claims["params"]["procedure"] and "claims_match" in claims["rationale"]


def test_without_a_judgement_the_failed_checks_decide(task_dir):
    mutation = propose(task_dir, None, checks=failing("within_range", "not increasing in 'a'"))
    assert mutation["rationale"].startswith("addresses answer_plausibility (not scored")
    assert "monoton" in mutation["params"]["prompt"]


# --- history, determinism ----------------------------------------------------------------------------------
def test_the_history_excludes_repeats_and_the_next_weakest_is_said_when_one_runs_dry(task_dir):
    history, seen = [], []
    judged = scores(goal_alignment=0.2, collaboration_efficiency=0.6)
    for _ in range(4):
        mutation = propose(task_dir, judged, history=history)
        key = (mutation["kind"], mutation["target"], json.dumps(mutation["params"], sort_keys=True))
        assert key not in seen
        seen.append(key)
        history.append(history_line(mutation))
    rationales = [json.JSONDecoder().raw_decode(h)[0]["rationale"] for h in history]
    # Goal alignment has two remedies (coder, finalizer); then the next weakest is addressed.
    assert [r.split(" (")[0] for r in rationales] == ["addresses goal_alignment"] * 2 + \
        ["addresses collaboration_efficiency"] * 2
    assert "goal_alignment has none left" in rationales[2]


def test_modelling_hints_already_tried_are_not_proposed_again(task_dir):
    history, prompts = [], []
    for _ in range(5):
        mutation = propose(task_dir, scores(output_quality=0.3), history=history)
        assert mutation["kind"] == "prompt_refinement"
        assert mutation["params"]["prompt"] not in prompts
        prompts.append(mutation["params"]["prompt"])
        history.append(history_line(mutation))


def test_a_modelling_change_the_incumbent_already_answers_is_not_proposed(tmp_path):
    """Asking a team that runs a random forest for tree ensembles changes nothing: the mutator
    reads the incumbent's approach and asks for something it does not do yet."""
    task = make_task(tmp_path / "c", kind="classification")
    weak = scores(output_quality=0.3)
    plain = propose(task, weak)
    assert "tree" in plain["params"]["prompt"].lower() or "logistic" in plain["params"]["prompt"].lower()
    for key, word in (("random_forest_classifier", "tree"), ("logistic_regression", "logistic")):
        approach = f"# Plan: the incumbent\nstrategy: {key} {{}}"
        proposal = propose(task, weak, approach=approach)
        assert proposal["kind"] == "prompt_refinement"
        assert word not in proposal["params"]["prompt"].lower(), proposal


def test_proposals_follow_content_not_wording_or_seed(tmp_path):
    a = make_task(tmp_path / "a")
    b = make_task(tmp_path / "renamed-folder", context="Measured in a lab.   ")
    judged = scores(output_quality=0.3)
    assert propose(a, judged, seed=1) == propose(b, judged, seed=1) == propose(a, judged, seed=7)


# --- reading the task's library rule --------------------------------------------------------------------------
def test_the_libraries_a_task_allows_are_read_from_its_requirements(tmp_path):
    assert libraries_allowed(STACK) == {"numpy", "scipy", "pandas", "scikit-learn"}
    assert libraries_allowed("Only numpy and sklearn may be used.") == {"numpy", "scikit-learn"}
    assert libraries_allowed("The model must use only the length as input.") == frozenset()
    msgs = messages(make_task(tmp_path / "t"), scores())
    facts = read_facts(*reading_view(msgs))
    assert not facts.allows(("pyoperon",)) and facts.allows(())
    unrestricted = messages(make_task(tmp_path / "u", requirements=("CPU only.",)), scores())
    assert read_facts(*reading_view(unrestricted)).allows(("pyoperon",))
