"""Trivial baselines (issue 11): computed by the engine without a model, scored by evaluate.py,
printed beside the team's official score."""
import csv
import io
import json
from pathlib import Path

from engine.assessment import trivial_predictions
from engine.ending import describe_baselines as describe
from engine.official import official_baselines
from engine.task import load_task
from tests.unit.test_validation import make_task

ROOT = Path(__file__).resolve().parents[2]


def _column(data: bytes, name: str) -> list[str]:
    return [row[name] for row in csv.DictReader(io.StringIO(data.decode()))]


def test_regression_baselines_are_the_training_mean_and_the_nearest_training_row(tmp_path):
    folder = make_task(tmp_path, [[x, x % 4, 3 * x] for x in range(10)], [[2, 2], [8.9, 0]])
    predictions = trivial_predictions(load_task(folder))
    assert [float(v) for v in _column(predictions["constant"], "y")] == [13.5, 13.5]
    # nearest in (x, site) standardised: (2, 2) is a training row; (8.9, 0) is nearest to (8, 0)
    assert [float(v) for v in _column(predictions["nearest_neighbour"], "y")] == [6.0, 24.0]
    assert _column(predictions["constant"], "id") == ["0", "1"]


def test_classification_baselines_predict_labels_in_the_contracts_type():
    task = load_task(ROOT / "examples" / "wine-cultivar")
    predictions = trivial_predictions(task)
    target = task.resources.target
    for data in predictions.values():
        assert all(v.isdigit() for v in _column(data, target))  # 2, never 2.0
    assert len(set(_column(predictions["constant"], target))) == 1


def test_the_summary_line_says_which_baseline_the_team_did_not_beat(tmp_path):
    folder = make_task(tmp_path, [[x, x % 4, 3 * x] for x in range(10)], [[2, 2], [8.9, 0]])
    (folder / "heldout" / "test_targets.csv").write_text("id,y\n0,6\n1,26.7\n")
    baselines = official_baselines(load_task(folder))
    assert all(b["ok"] for b in baselines.values()), baselines
    line = describe(baselines, {"ok": True, "value": 5.0, "higher_is_better": False})
    assert "does NOT beat nearest neighbour" in line and "constant" in line
    assert "beats every baseline" in describe(baselines, {"ok": True, "value": 0.1, "higher_is_better": False})


def test_a_lead_of_float_noise_is_a_tie_not_a_win():
    """Issue 27 item 5d: an r2 of 1.1e-16 against the constant's 0 read 'beats every baseline'."""
    baselines = {"constant": {"ok": True, "value": 0.0}, "nearest_neighbour": {"ok": True, "value": -0.31}}
    line = describe(baselines, {"ok": True, "value": 1.1e-16, "higher_is_better": True})
    assert "beats every baseline" not in line and "ties constant" in line
    line = describe({"constant": {"ok": True, "value": 2.5}}, {"ok": True, "value": 2.5 - 4e-16,
                                                                  "higher_is_better": False})
    assert "ties constant" in line
    # a real lead, however small against the scores, still counts
    assert "beats every baseline" in describe(baselines, {"ok": True, "value": 1e-4, "higher_is_better": True})


def test_a_lead_within_the_test_sets_noise_is_a_tie_not_a_win():
    """Issue 39: where the team's lead over a baseline has a bootstrap interval, its verdict
    decides the summary's word: within the noise is a tie, whatever the raw scores say."""
    from engine.official_gap import Gap

    baselines = {"constant": {"ok": True, "value": 0.40}, "nearest_neighbour": {"ok": True, "value": 0.71}}
    team = {"ok": True, "value": 0.72, "higher_is_better": True}
    assert "beats every baseline" in describe(baselines, team)  # no interval: the raw scores decide
    gaps = {"constant": Gap("constant", 0.32, 0.25, 0.39, 88, 2000, "the engine's r2", "better"),
            "nearest_neighbour": Gap("nearest_neighbour", 0.01, -0.03, 0.05, 88, 2000, "the engine's r2",
                                     "within noise")}
    line = describe(baselines, team, gaps)
    assert "beats every baseline" not in line
    assert "ties nearest neighbour within the test set's noise" in line and "constant" not in line.split(":")[-1]
    worse = {"nearest_neighbour": Gap("nearest_neighbour", -0.2, -0.3, -0.1, 88, 2000, "r2", "worse")}
    assert "does NOT beat nearest neighbour" in describe(baselines, team, worse)
