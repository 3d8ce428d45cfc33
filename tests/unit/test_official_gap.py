"""The team's official lead over a baseline, and whether it is beyond the test set's noise
(engine/official_gap.py): a paired bootstrap over the held-out rows, scored by the engine's own
metric only where it reproduces evaluate.py, otherwise by evaluate.py itself."""
import random

import numpy as np
import pytest

import engine.official_gap as gap_module
from engine import metrics
from engine.official_gap import BATCHED, official_gaps
from engine.official import official_for_predictions
from engine.task import load_task
from tests.unit.test_validation import EVALUATE, make_task

RMSE_EVALUATE = EVALUATE.replace('float((merged["y"] - merged["y_pred"]).abs().median())',
                                 'float(((merged["y"] - merged["y_pred"]) ** 2).mean() ** 0.5)') \
    .replace('"median_abs_error"', '"rmse"')
# Says "rmse" but scores predictions rounded to whole numbers: not what the engine computes
ROUNDED_EVALUATE = RMSE_EVALUATE.replace('merged["y_pred"]) ** 2', 'merged["y_pred"].round()) ** 2')


def _task(tmp_path, evaluate: str = RMSE_EVALUATE, metric: str = "rmse", rows: int = 150):
    rng = random.Random(0)
    test_x = [rng.uniform(0, 10) for _ in range(rows)]
    folder = make_task(tmp_path, [[x, x % 4, 2 * x] for x in range(40)], [[x, 1] for x in test_x],
                       evaluate=evaluate)
    (folder / "Evaluation.md").write_text(f"# Evaluation\n\n## Metric\nname: {metric}\ndirection: lower is better\n")
    truth = [2 * x for x in test_x]
    with (folder / "heldout" / "test_targets.csv").open("w") as fh:
        fh.write("id,y\n" + "".join(f"{k},{y!r}\n" for k, y in enumerate(truth)))
    return load_task(folder), truth


def _predictions(values) -> bytes:
    return ("id,y\n" + "".join(f"{k},{v!r}\n" for k, v in enumerate(values))).encode()


def _noisy(truth, sd: float, seed: int) -> bytes:
    rng = random.Random(seed)
    return _predictions([y + rng.gauss(0, sd) for y in truth])


def _scored(task, data: bytes):
    return data, official_for_predictions(task, data)


def test_the_batched_metrics_are_the_engines_metrics():
    rng = np.random.default_rng(0)
    truth = rng.normal(3, 2, size=(6, 40))
    pred = truth + rng.normal(0, 0.5, size=truth.shape)
    labels_t, labels_p = rng.integers(0, 3, size=(6, 40)).astype(float), rng.integers(0, 3, size=(6, 40)).astype(float)
    for name, batched in BATCHED.items():
        p, t = (labels_p, labels_t) if name == "accuracy" else (pred, truth)
        expected = [metrics.METRICS[name](list(pr), list(tr)) for pr, tr in zip(p, t)]
        assert np.allclose(batched(p, t), expected), name


def test_a_clear_lead_is_better_a_reroll_of_the_same_model_is_within_noise_and_a_copy_is_identical(tmp_path):
    task, truth = _task(tmp_path)
    team = _scored(task, _noisy(truth, 0.2, seed=1))
    gaps = official_gaps(task, *team, {
        "constant": _scored(task, _predictions([10.0] * len(truth))),
        "same_model_other_seed": _scored(task, _noisy(truth, 0.2, seed=2)),
        "copy": team,
        "much_better": _scored(task, _noisy(truth, 0.01, seed=3)),
    })
    assert gaps["constant"].verdict == "better" and gaps["constant"].low > 0
    assert gaps["same_model_other_seed"].verdict == "within noise"
    assert gaps["same_model_other_seed"].low < 0 < gaps["same_model_other_seed"].high
    assert gaps["copy"].verdict == "identical" and "same prediction" in gaps["copy"].describe()
    # rmse is lower-is-better: the lead is oriented, negative when the team is the worse one
    assert gaps["much_better"].verdict == "worse" and gaps["much_better"].difference < 0
    assert "WORSE" in gaps["much_better"].describe()
    # the observed lead is evaluate.py's own official difference, not a resample's
    official_team, official_constant = team[1]["value"], official_for_predictions(
        task, _predictions([10.0] * len(truth)))["value"]
    assert gaps["constant"].difference == pytest.approx(official_constant - official_team)
    assert gaps["constant"].resamples == gap_module.RESAMPLES and gaps["constant"].rows == len(truth)
    assert "engine's rmse" in gaps["constant"].scorer


def test_an_unknown_metric_is_resampled_through_evaluate_py(tmp_path, monkeypatch):
    monkeypatch.setattr(gap_module, "RESAMPLES_EVALUATE", 60)
    task, truth = _task(tmp_path, evaluate=EVALUATE, metric="median_abs_error", rows=60)
    team = _scored(task, _noisy(truth, 0.1, seed=1))
    gaps = official_gaps(task, *team, {"constant": _scored(task, _predictions([10.0] * len(truth)))})
    assert gaps["constant"].scorer == "evaluate.py --truth" and gaps["constant"].resamples == 60
    assert gaps["constant"].verdict == "better"


def test_an_evaluate_py_that_disagrees_with_the_engines_metric_is_the_one_trusted(tmp_path, monkeypatch):
    monkeypatch.setattr(gap_module, "RESAMPLES_EVALUATE", 40)
    task, truth = _task(tmp_path, evaluate=ROUNDED_EVALUATE, rows=60)
    team = _scored(task, _noisy(truth, 0.1, seed=1))
    gaps = official_gaps(task, *team, {"other": _scored(task, _noisy(truth, 3.0, seed=2))})
    assert gaps["other"].scorer == "evaluate.py --truth", gaps["other"]


def test_without_a_heldout_csv_or_a_score_there_is_no_interval_and_it_says_why(tmp_path):
    task, truth = _task(tmp_path, rows=30)
    team = _scored(task, _noisy(truth, 0.1, seed=1))
    missing = {"ok": False, "error": "the single agent could not call its model"}
    gaps = official_gaps(task, *team, {"single_agent": (None, missing),
                                       "short": _scored(task, _predictions(truth[:10]))})
    assert gaps["single_agent"].verdict == "" and "no official score" in gaps["single_agent"].why
    assert gaps["short"].verdict == "" and "no official score" in gaps["short"].why  # evaluate.py refused it
    (task.folder / "heldout" / "test_targets.csv").unlink()
    (task.folder / "heldout" / "answers.txt").write_text("kept elsewhere\n")
    other = (_noisy(truth, 0.3, seed=2), {"ok": True, "value": 0.3, "higher_is_better": False})
    gaps = official_gaps(task, team[0], {"ok": True, "value": 0.1, "higher_is_better": False}, {"other": other})
    assert gaps["other"].verdict == "" and "heldout/" in gaps["other"].why


def test_the_summary_says_how_the_intervals_were_made_then_one_line_per_baseline(tmp_path):
    task, truth = _task(tmp_path, rows=40)
    team = _scored(task, _noisy(truth, 0.2, seed=1))
    gaps = official_gaps(task, *team, {"constant": _scored(task, _predictions([10.0] * len(truth)))})
    lines = gap_module.describe_gaps(list(gaps.values()))
    assert lines[0].startswith("the team's official lead (positive = better; paired bootstrap, 2000 resamples "
                               "of the 40 held-out rows")
    assert lines[1].startswith("  lead over constant: +") and lines[1].endswith("better beyond the test set's noise")


def test_labels_are_compared_as_classes():
    """Accuracy on labels: 2 and 2.0 are one class; strings are compared as strings."""
    matrix = gap_module._encode([["2", "red", "3"], ["2.0", "red", "blue"]])
    assert matrix[0][0] == matrix[1][0] and matrix[0][1] == matrix[1][1] and matrix[0][2] != matrix[1][2]


def test_a_lead_made_of_float_noise_is_within_noise_not_better(tmp_path):
    """Issue 27 item 5d: predictions that differ from a baseline's only in their last bits (each
    moved a millionth of a millionth toward the truth) must not read 'better beyond the test
    set's noise'."""
    task, truth = _task(tmp_path)
    baseline = [y + random.Random(k).gauss(0, 0.5) for k, y in enumerate(truth)]
    team = [b + (t - b) * 1e-12 for b, t in zip(baseline, truth)]
    assert team != baseline
    gaps = official_gaps(task, *_scored(task, _predictions(team)), {"constant": _scored(task, _predictions(baseline))})
    assert gaps["constant"].verdict == "within noise", gaps["constant"]
    assert "better beyond" not in gaps["constant"].describe()


def test_too_few_held_out_rows_give_no_interval_and_no_verdict(tmp_path):
    """Issue 39: four rows have 35 distinct resamples; an interval from them would print "better
    beyond the test set's noise" on nothing."""
    task, truth = _task(tmp_path, rows=4)
    gaps = official_gaps(task, *_scored(task, _predictions(truth)),
                         {"rough": _scored(task, _noisy(truth, 5.0, 1)),
                          "copy": _scored(task, _predictions(truth))})
    assert gaps["rough"].verdict == "" and "only 4 held-out rows" in gaps["rough"].why
    assert "35 distinct resamples" in gaps["rough"].why and "needs at least 5" in gaps["rough"].why
    assert gaps["copy"].verdict == "identical"  # a copy is still known to be one
