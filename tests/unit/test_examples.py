"""The example task folders: documents parse, data is consistent, evaluate.py is strict,
and make_data.py reproduces the committed files byte for byte."""
from __future__ import annotations

import contextlib
import io
import json
import math
import runpy
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
TASKS = ("discontinuous-1d", "diabetes-progression")
REQUIRED_FILES = ("Problem.md", "Requirements.md", "Evaluation.md", "Data_config.json",
                  "evaluate.py", "make_data.py", "data/train.csv", "data/test_features.csv",
                  "heldout/test_targets.csv")


def config(task: str) -> dict:
    return json.loads((EXAMPLES / task / "Data_config.json").read_text())


def metric_section(task: str) -> tuple[str, str]:
    """(name, direction) from the first two lines of Evaluation.md's ## Metric section."""
    text = (EXAMPLES / task / "Evaluation.md").read_text().split("\n")
    start = text.index("## Metric") + 1
    name_line, direction_line = [line for line in text[start:] if line.strip()][:2]
    assert name_line.startswith("name: "), name_line
    assert direction_line in ("direction: lower is better", "direction: higher is better")
    return name_line[len("name: "):], direction_line[len("direction: "):]


def evaluate(task: str, predictions: Path, in_process: bool = True) -> subprocess.CompletedProcess:
    """``python evaluate.py PREDICTIONS``: its exit code, stdout and stderr. By default the script
    runs as ``__main__`` in this interpreter (the same code, without a new Python and pandas per
    case); ``in_process=False`` runs the real command, as the engine does."""
    script = EXAMPLES / task / "evaluate.py"
    args = [str(script), str(predictions)]
    if not in_process:
        return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=60)
    out, err = io.StringIO(), io.StringIO()
    saved_argv, sys.argv = sys.argv, args
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            runpy.run_path(str(script), run_name="__main__")
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    finally:
        sys.argv = saved_argv
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def perfect_predictions(task: str) -> pd.DataFrame:
    truth = pd.read_csv(EXAMPLES / task / "heldout" / "test_targets.csv")
    target = config(task)["target"]
    return truth.astype({target: float})  # diabetes targets are integers; predictions are floats


@pytest.mark.parametrize("task", TASKS)
def test_folder_has_every_file(task):
    missing = [f for f in REQUIRED_FILES if not (EXAMPLES / task / f).is_file()]
    assert not missing


@pytest.mark.parametrize("task", TASKS)
def test_markdown_documents_follow_the_loader_format(task):
    problem = (EXAMPLES / task / "Problem.md").read_text().split("\n")
    assert problem[0].startswith("# ") and len(problem[0]) > 3
    assert "## Goal" in problem and "## Context" in problem
    requirements = (EXAMPLES / task / "Requirements.md").read_text().strip().split("\n")
    assert requirements[0] == "# Requirements"
    bullets = [line for line in requirements[1:] if line.strip()]
    assert bullets and all(line.startswith("- ") for line in bullets)
    assert (EXAMPLES / task / "Evaluation.md").read_text().startswith("# Evaluation\n")
    metric_section(task)


@pytest.mark.parametrize("task", TASKS)
def test_data_config_matches_the_csv_files(task):
    cfg = config(task)
    task_dir = EXAMPLES / task
    train = pd.read_csv(task_dir / cfg["files"]["train"])
    test = pd.read_csv(task_dir / cfg["files"]["test_features"])
    targets = pd.read_csv(task_dir / "heldout" / "test_targets.csv")
    features, target, id_col = cfg["features"], cfg["target"], cfg["id_column"]
    assert list(train.columns) == features + [target]
    assert list(test.columns) == [id_col] + features
    assert list(targets.columns) == [id_col, target]
    assert test[id_col].tolist() == targets[id_col].tolist()
    assert test[id_col].is_unique
    assert set(cfg["predictions"]["columns"]) == {id_col, target}
    assert not train.isna().any().any() and not test.isna().any().any()
    assert set(cfg["limits"]) == {"wall_seconds", "cpu_seconds", "memory_mb"}


def test_example_sizes():
    assert len(pd.read_csv(EXAMPLES / "discontinuous-1d" / "data" / "train.csv")) == 200
    grid = pd.read_csv(EXAMPLES / "discontinuous-1d" / "data" / "test_features.csv")["x"]
    assert len(grid) == 1000 and grid.is_monotonic_increasing
    assert grid.iloc[0] == -1 and grid.iloc[-1] == 1
    train = pd.read_csv(EXAMPLES / "diabetes-progression" / "data" / "train.csv")
    test = pd.read_csv(EXAMPLES / "diabetes-progression" / "data" / "test_features.csv")
    assert len(train) + len(test) == 442 and len(test) == 88


@pytest.mark.parametrize("task", TASKS)
def test_perfect_predictions_score_perfectly(task, tmp_path):
    path = tmp_path / "predictions.csv"
    perfect_predictions(task).sample(frac=1.0, random_state=0).to_csv(path, index=False)  # order is free
    proc = evaluate(task, path, in_process=False)  # the real command, as the engine runs it
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().split("\n")
    assert len(lines) == 1
    result = json.loads(lines[0])
    assert set(result) == {"metric", "value", "higher_is_better", "n"}
    name, direction = metric_section(task)
    assert result["metric"] == name
    assert result["higher_is_better"] is (direction == "higher is better")
    assert result["n"] == len(perfect_predictions(task))
    assert math.isclose(result["value"], 1.0 if result["higher_is_better"] else 0.0, abs_tol=1e-12)


def test_metric_values_are_the_documented_formulas(tmp_path):
    truth = perfect_predictions("discontinuous-1d")
    zeros = truth.assign(y=0.0)
    zeros.to_csv(tmp_path / "zeros.csv", index=False)
    assert json.loads(evaluate("discontinuous-1d", tmp_path / "zeros.csv").stdout)["value"] == 1.0

    truth = perfect_predictions("diabetes-progression")
    mean = truth.assign(progression=truth["progression"].mean())
    mean.to_csv(tmp_path / "mean.csv", index=False)
    value = json.loads(evaluate("diabetes-progression", tmp_path / "mean.csv").stdout)["value"]
    assert math.isclose(value, 0.0, abs_tol=1e-12)


def _drop_row(df, target):
    return df.iloc[1:]


def _extra_id(df, target):
    return pd.concat([df, pd.DataFrame({"id": [10**6], target: [0.0]})])


def _duplicate_id(df, target):
    out = df.copy()
    out.loc[out.index[1], "id"] = out["id"].iloc[0]
    return out


def _nan_value(df, target):
    out = df.copy()
    out.loc[out.index[3], target] = float("nan")
    return out


def _inf_value(df, target):
    out = df.copy()
    out.loc[out.index[3], target] = float("inf")
    return out


def _missing_id_column(df, target):
    return df[[target]]


def _renamed_target(df, target):
    return df.rename(columns={target: "prediction"})


def _text_value(df, target):
    out = df.astype({target: object})
    out.loc[out.index[0], target] = "abc"
    return out


MALFORMED = {
    "missing_row": (_drop_row, "missing ids"),
    "extra_id": (_extra_id, "unexpected ids"),
    "duplicate_id": (_duplicate_id, "duplicate ids"),
    "nan": (_nan_value, "NaN or inf"),
    "inf": (_inf_value, "NaN or inf"),
    "no_id_column": (_missing_id_column, "missing column"),
    "no_target_column": (_renamed_target, "missing column"),
    "text": (_text_value, "non-numeric"),
}


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_predictions_are_rejected(task, case, tmp_path):
    corrupt, expected_message = MALFORMED[case]
    path = tmp_path / "predictions.csv"
    corrupt(perfect_predictions(task), config(task)["target"]).to_csv(path, index=False)
    proc = evaluate(task, path)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert expected_message in proc.stderr


@pytest.mark.parametrize("task", TASKS)
def test_missing_or_empty_predictions_file_is_rejected(task, tmp_path):
    proc = evaluate(task, tmp_path / "nope.csv")
    assert proc.returncode == 2 and "not found" in proc.stderr
    (tmp_path / "empty.csv").write_text("")
    proc = evaluate(task, tmp_path / "empty.csv")
    assert proc.returncode == 2 and "could not parse" in proc.stderr


@pytest.mark.parametrize("task", TASKS)
def test_make_data_is_deterministic(task, tmp_path):
    proc = subprocess.run([sys.executable, str(EXAMPLES / task / "make_data.py"), str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for rel in ("data/train.csv", "data/test_features.csv", "heldout/test_targets.csv"):
        assert (tmp_path / rel).read_bytes() == (EXAMPLES / task / rel).read_bytes(), rel


def test_discontinuous_targets_follow_the_documented_function():
    test = pd.read_csv(EXAMPLES / "discontinuous-1d" / "data" / "test_features.csv")
    truth = perfect_predictions("discontinuous-1d")
    x = test["x"].to_numpy()
    expected = np.where(x <= 0, 0.2 * np.sin(6 * x), 1 + 0.1 * x * np.cos(18 * x))
    assert np.allclose(truth["y"].to_numpy(), expected, atol=1e-10)
