"""The offline judge (engine/offline/search_roles.py) scores what its prompt shows: output quality
relative to the trivial baselines on the same folds, and collaboration as cost for what was
achieved, so that the judge's J ranks candidates the way their validation does when both deliver."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.judge import build_judge_messages, parse_judgement
from engine.offline import scientist
from engine.task import load_task

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "discontinuous-1d"
CHECKS = [{"name": n, "passed": True, "detail": "ok"} for n in ("exit_ok", "output_exists", "finite")]


@pytest.fixture(scope="module")
def task():
    return load_task(EXAMPLE)


def summary(value: float, *, retries: int = 0, runs: tuple[str, ...] = ("ok",), tokens: int = 20_000,
            delivered: bool = True) -> dict:
    return {"agents": {"coder": "SUCCESS", "verifier": "SUCCESS" if delivered else "FAILURE"},
            "model_calls": 6 + 2 * retries, "tokens": tokens, "retries": retries,
            "executions": [{"purpose": "program", "status": s, "exit_code": 0 if s == "ok" else 1} for s in runs],
            "last_stdout": "", "final_report": "",
            "validation": {"ok": delivered, "metric": "rmse", "value": value if delivered else None,
                           "higher_is_better": False, "split": "kfold",
                           "baselines": {"constant": 1.0, "nearest_neighbour": 0.8}}}


def judged(task, execution: dict) -> dict[str, float]:
    scores, _ = parse_judgement(scientist.respond(build_judge_messages(task, execution, CHECKS), seed=3))
    return {**scores, "J": sum(scores.values()) / len(scores)}


def test_output_quality_is_skill_over_the_best_baseline_not_an_absolute_scale(task):
    at_baseline = judged(task, summary(0.8))["output_quality"]      # no better than nearest neighbour
    halfway = judged(task, summary(0.4))["output_quality"]
    assert judged(task, summary(0.0))["output_quality"] == 1.0
    assert halfway == pytest.approx((at_baseline + 1.0) / 2)         # in proportion between the two
    assert 0.0 < at_baseline < halfway


def test_candidates_all_below_the_baseline_are_still_ranked_by_their_validation(task):
    """Issue 27 item 5b: output quality clipped to 0 below the best baseline, and J then ranked
    such candidates by their tokens: Mimosa rejected a candidate 36 % better in validation
    because it spent a few more tokens."""
    incumbent = judged(task, summary(1.5, tokens=20_000))
    candidate = judged(task, summary(1.5 / 1.36, tokens=22_000))   # 36 % better, still worse than 0.8
    assert 0.0 < incumbent["output_quality"] < candidate["output_quality"]
    assert candidate["J"] > incumbent["J"]
    # and every one below the baseline stays below every one above it
    assert candidate["output_quality"] < judged(task, summary(0.79))["output_quality"]
    # a real model is asked for the same: the procedure it reads keeps the ranking below the baseline
    system = build_judge_messages(task, summary(1.5), CHECKS)[0]["content"]
    assert "below the best baseline keep ranking" in system and "no better than the best baseline is 0" not in system


def test_a_repair_that_delivered_costs_its_round_trip_and_one_that_delivered_nothing_is_waste(task):
    clean = judged(task, summary(0.5))
    repaired = judged(task, summary(0.5, retries=1, runs=("error", "ok"), tokens=30_000))
    wasted = judged(task, summary(0.5, retries=3, runs=("error",) * 4, tokens=50_000, delivered=False))
    assert clean["collaboration_efficiency"] > repaired["collaboration_efficiency"] > \
        wasted["collaboration_efficiency"]
    assert wasted["collaboration_efficiency"] < 0.5


def test_a_much_better_answer_whose_first_draft_needed_one_repair_is_judged_above_a_clean_weaker_one(task):
    """A fixed typo in the first draft does not outweigh a validation error cut by a third: else
    Mimosa rejects real improvements because the coder's draft had a bug the team repaired."""
    incumbent = judged(task, summary(0.6))
    candidate = judged(task, summary(0.4, retries=1, runs=("error", "ok"), tokens=30_000))
    assert candidate["J"] > incumbent["J"]
    feedback = json.loads(scientist.respond(build_judge_messages(
        task, summary(0.4, retries=1, runs=("error", "ok")), CHECKS), seed=3))
    assert "1 repair loop(s) that ended in a delivered answer" in feedback["collaboration_efficiency"]["feedback"]
