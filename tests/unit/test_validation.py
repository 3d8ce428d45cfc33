"""In-loop validation mirrors the question the official test asks (issue 11): the split a task
declares, or an extrapolation split when its test inputs lie beyond the training range; each
fold scored by the task's own evaluate.py (--truth), so any metric name works."""
import csv
import json
from pathlib import Path

import pytest

from engine.task import load_task
from engine.validation import read_data
from engine.sandbox.subprocess_executor import SubprocessExecutor

# A real program in the real sandbox, standard library only (it starts in a fraction of a second).
LINE = """import csv
rows = list(csv.DictReader(open("data/test_features.csv")))
with open("predictions.csv", "w") as f:
    f.write("id,y\\n" + "".join(f"{r['id']},{2 * float(r['x']) + OFFSET}\\n" for r in rows))
"""

# A contract-following evaluate.py whose metric the engine has no implementation of.
EVALUATE = '''
import argparse, json, sys
from pathlib import Path
import pandas as pd
parser = argparse.ArgumentParser()
parser.add_argument("predictions")
parser.add_argument("--truth", default=str(Path(__file__).parent / "heldout" / "test_targets.csv"))
args = parser.parse_args()
truth, pred = pd.read_csv(args.truth), pd.read_csv(args.predictions)
if sorted(pred["id"]) != sorted(truth["id"]):
    print("ids do not match the truth", file=sys.stderr)
    sys.exit(2)
merged = truth.merge(pred, on="id", suffixes=("", "_pred"))
value = float((merged["y"] - merged["y_pred"]).abs().median())
print(json.dumps({"metric": "median_abs_error", "value": value, "higher_is_better": False, "n": len(merged)}))
'''


def _csv(path: Path, header: list[str], rows: list[list]) -> None:
    path.write_text("\n".join([",".join(header), *(",".join(str(v) for v in row) for row in rows)]) + "\n")


def make_task(root: Path, train: list[list], test: list[list], header=("x", "site", "y"), validation=None,
              evaluate: str = EVALUATE) -> Path:
    d = root / "a-law"
    (d / "data").mkdir(parents=True)
    (d / "heldout").mkdir()
    (d / "Problem.md").write_text("# A law\n\n## Goal\nPredict y.\n\n## Context\nMeasured.\n")
    (d / "Requirements.md").write_text("# Requirements\n\n- CPU only\n")
    (d / "Evaluation.md").write_text("# Evaluation\n\n## Metric\nname: median_abs_error\ndirection: lower is better\n")
    (d / "evaluate.py").write_text(evaluate)
    _csv(d / "data" / "train.csv", list(header), train)
    test_header = ["id", *[h for h in header if h != "y"]]
    _csv(d / "data" / "test_features.csv", test_header, [[k, *row] for k, row in enumerate(test)])
    _csv(d / "heldout" / "test_targets.csv", ["id", "y"], [[k, 0] for k in range(len(test))])
    config = {"files": {"train": "data/train.csv", "test_features": "data/test_features.csv"}, "target": "y",
              "id_column": "id", "predictions": {"file": "predictions.csv", "columns": {"id": "int", "y": "float"}}}
    if validation:
        config["validation"] = validation
    (d / "Data_config.json").write_text(json.dumps(config))
    return d


def _values(task, rows, column):
    data = read_data(task)
    return [float(data.rows[i][column]) for i in rows]


def test_test_inputs_beyond_the_training_range_get_an_extrapolation_split(tmp_path):
    folder = make_task(tmp_path, [[x, x % 4, 2 * x] for x in range(60)], [[x, x % 4] for x in range(60, 80)])
    task = load_task(folder)
    plan = task.assessment().plan()
    assert (plan.split, plan.column, plan.side, plan.chosen_by) == ("holdout_range", "x", "upper", "trellis")
    assert "20 of 20 test rows" in plan.reason and "above the training maximum 59" in plan.reason
    for fit, val in task.assessment().folds(plan, read_data(task), seed=0):
        # every validation row lies above every row the program fits on: extrapolation
        assert min(_values(task, val, "x")) > max(_values(task, fit, "x"))


def test_test_inputs_below_the_training_range_validate_on_the_lower_end(tmp_path):
    folder = make_task(tmp_path, [[x, x % 4, 2 * x] for x in range(20, 80)], [[x, x % 4] for x in range(0, 20)])
    task = load_task(folder)
    plan = task.assessment().plan()
    assert (plan.split, plan.side) == ("holdout_range", "lower")
    for fit, val in task.assessment().folds(plan, read_data(task), seed=0):
        assert max(_values(task, val, "x")) < min(_values(task, fit, "x"))


def test_test_inputs_inside_the_training_range_keep_shuffled_folds_and_each_row_validates_once(tmp_path):
    folder = make_task(tmp_path, [[x, x % 4, 2 * x] for x in range(60)], [[x + 0.5, x % 4] for x in range(0, 58, 3)])
    task = load_task(folder)
    plan = task.assessment().plan()
    assert (plan.split, plan.chosen_by) == ("kfold", "default")
    folds = task.assessment().folds(plan, read_data(task), seed=3)
    assert sorted(i for _, val in folds for i in val) == list(range(60))


def test_a_declared_group_split_never_puts_one_group_on_both_sides(tmp_path):
    folder = make_task(tmp_path, [[x, x % 7, 2 * x] for x in range(70)], [[x, 9] for x in range(5)],
                       validation={"split": "group", "column": "site", "folds": 3})
    task = load_task(folder)
    plan = task.assessment().plan()
    assert (plan.split, plan.chosen_by) == ("group", "task")
    folds = task.assessment().folds(plan, read_data(task), seed=0)
    assert len(folds) == 3
    for fit, val in folds:
        assert not set(_values(task, fit, "site")) & set(_values(task, val, "site"))


def test_a_declared_time_split_fits_on_the_past_only(tmp_path):
    folder = make_task(tmp_path, [[x, x % 4, 2 * x] for x in range(60)], [[x, 1] for x in range(60, 70)],
                       validation={"split": "time", "column": "x", "folds": 3})
    task = load_task(folder)
    folds = task.assessment().folds(task.assessment().plan(), read_data(task), seed=0)
    assert len(folds) == 3
    for fit, val in folds:
        assert max(_values(task, fit, "x")) < min(_values(task, val, "x"))


def test_the_program_sees_only_the_test_files_columns_in_validation(tmp_path):
    # `site` is recorded in training only; the real test file would never give it to the program.
    folder = make_task(tmp_path, [[x, x % 4, 2 * x] for x in range(40)], [[x + 0.5] for x in range(0, 38, 2)],
                       header=("x", "site", "y"))
    (folder / "data" / "test_features.csv").write_text("id,x\n" + "".join(f"{k},{k + 0.5}\n" for k in range(19)))
    task = load_task(folder)
    split = task.assessment().split(tmp_path / "fold", seed=0, fold=0)
    header = next(csv.reader(split.files["data/test_features.csv"].open()))
    assert header == ["id", "x"]


def test_each_fold_is_scored_by_the_tasks_own_evaluate_py_whatever_its_metric(tmp_path):
    folder = make_task(tmp_path, [[x, x % 4, 2 * x] for x in range(40)], [[x + 0.5, x % 4] for x in range(0, 38, 2)])
    task = load_task(folder)
    scored, _ = task.assessment().validate("OFFSET = 1\n" + LINE, SubprocessExecutor(tmp_path / "sandbox"), seed=0)
    assert scored["ok"], scored
    assert (scored["metric"], scored["scorer"]) == ("median_abs_error", "evaluate.py")
    assert scored["value"] == pytest.approx(1.0) and len(scored["split_values"]) == 5


def test_an_evaluate_py_without_truth_falls_back_to_the_engines_metric_or_says_why(tmp_path):
    old_style = EVALUATE.replace('parser.add_argument("--truth", default=', 'parser.add_argument("--answers", default=')
    old_style = old_style.replace("args.truth", "args.answers")
    folder = make_task(tmp_path, [[x, x % 4, 2 * x] for x in range(40)], [[x + 0.5, x % 4] for x in range(0, 38, 2)],
                       evaluate=old_style)
    task = load_task(folder)
    scored, _ = task.assessment().validate("OFFSET = 0\n" + LINE, SubprocessExecutor(tmp_path / "sandbox"), seed=0)
    assert not scored["ok"]
    assert "median_abs_error" in scored["error"] and "--truth" in scored["error"]

