"""The example task folders: each loads as a task, its data agrees with Data_config.json (and
with the split it declares), its evaluate.py scores what Evaluation.md documents, with and
without --truth, and rejects malformed predictions; make_data.py reproduces the committed files
byte for byte. Every test runs over every folder in examples/, so a new example is covered
without editing this file."""
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

from engine.task import load_task

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
# The examples whose answer is one row per test row (the kinds `rows` and `series`): what this file
# asks of their files and evaluate.py. An answer kind with a file of its own (a table of
# parameters) is checked by its example's own test (tests/integration/test_reaction_kinetics_example.py).
TASKS = tuple(sorted(p.name for p in EXAMPLES.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))
                     and json.loads((p / "Data_config.json").read_text()).get("answer", {}).get("kind", "rows")
                     in ("rows", "series")))
REQUIRED_FILES = ("Problem.md", "Requirements.md", "Evaluation.md", "Data_config.json",
                  "evaluate.py", "make_data.py", "data/train.csv", "data/test_features.csv",
                  "heldout/test_targets.csv")
HELDOUT = "heldout/test_targets.csv"


def _relative_l2(pred, true):
    return float(np.linalg.norm(pred - true) / np.linalg.norm(true))


def _r2(pred, true):
    return float(1 - np.sum((true - pred) ** 2) / np.sum((true - true.mean()) ** 2))


# Independent formulas for the metric names the examples use, to check each evaluate.py
# computes what its Evaluation.md documents. A new metric name needs its formula here.
METRICS = {
    "relative_l2": _relative_l2,
    "r2": _r2,
    "rmse": lambda pred, true: float(np.sqrt(np.mean((pred - true) ** 2))),
    "mae": lambda pred, true: float(np.mean(np.abs(pred - true))),
    "accuracy": lambda pred, true: float(np.mean(pred == true)),
}


def config(task: str) -> dict:
    return json.loads((EXAMPLES / task / "Data_config.json").read_text())


def features(task: str) -> list[str]:
    cfg = config(task)
    if "features" in cfg:
        return cfg["features"]
    header = pd.read_csv(EXAMPLES / task / cfg["files"]["test_features"], nrows=0).columns
    return [c for c in header if c not in (cfg["id_column"], cfg["target"])]


def is_classification(task: str) -> bool:
    return config(task).get("kind") == "classification"


def metric_section(task: str) -> tuple[str, str]:
    """(name, direction) from the first two lines of Evaluation.md's ## Metric section."""
    text = (EXAMPLES / task / "Evaluation.md").read_text().split("\n")
    start = text.index("## Metric") + 1
    name_line, direction_line = [line for line in text[start:] if line.strip()][:2]
    assert name_line.startswith("name: "), name_line
    assert direction_line in ("direction: lower is better", "direction: higher is better")
    return name_line[len("name: "):], direction_line[len("direction: "):]


def evaluate(task: str, *args: str | Path, in_process: bool = True) -> subprocess.CompletedProcess:
    """``python evaluate.py ARGS...``: its exit code, stdout and stderr. By default the script
    runs as ``__main__`` in this interpreter (the same code, without a new Python and pandas per
    case); ``in_process=False`` runs the real command, as the engine does."""
    script = EXAMPLES / task / "evaluate.py"
    argv = [str(script), *map(str, args)]
    if not in_process:
        return subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=60,
                              cwd=EXAMPLES / task)
    out, err = io.StringIO(), io.StringIO()
    saved_argv, sys.argv = sys.argv, argv
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            runpy.run_path(str(script), run_name="__main__")
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    finally:
        sys.argv = saved_argv
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())


def result_line(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().split("\n")
    assert len(lines) == 1, proc.stdout
    result = json.loads(lines[0])
    assert set(result) == {"metric", "value", "higher_is_better", "n"}
    return result


def truth_frame(task: str) -> pd.DataFrame:
    return pd.read_csv(EXAMPLES / task / HELDOUT)


def perfect_predictions(task: str) -> pd.DataFrame:
    target = config(task)["target"]
    truth = truth_frame(task)
    # regression predictions are floats even where the targets are whole numbers (diabetes)
    return truth if is_classification(task) else truth.astype({target: float})


def trivial_value(task: str):
    """What a scientist's first baseline predicts: the training mean, or the majority class."""
    train = pd.read_csv(EXAMPLES / task / config(task)["files"]["train"])
    target = train[config(task)["target"]]
    return int(target.mode().min()) if is_classification(task) else float(target.mean())


def truth_columns(task: str) -> list[str]:
    """The columns of the task's truth files: id and target, then what its answer kind's metric
    needs (a forecast's series and time)."""
    return load_task(EXAMPLES / task).assessment().truth_columns()


def training_truth(task: str, rows: int = 40) -> pd.DataFrame:
    """A validation-fold-like truth file built from training rows: non-contiguous ids, shuffled."""
    cfg = config(task)
    train = pd.read_csv(EXAMPLES / task / cfg["files"]["train"])
    fold = train.sample(n=min(rows, len(train)), random_state=3)
    extra = {c: fold[c].to_numpy() for c in truth_columns(task)[2:]}
    return pd.DataFrame({cfg["id_column"]: 1000 + 7 * np.arange(len(fold)),
                         cfg["target"]: fold[cfg["target"]].to_numpy(), **extra})


# --- the folder and its documents ---------------------------------------------------------

def test_there_are_examples_of_every_kind_and_split():
    configs = [config(t) for t in TASKS]
    assert len(TASKS) >= 5
    assert any(c.get("kind") == "classification" for c in configs)
    splits = {c["validation"]["split"] for c in configs if "validation" in c}
    assert "holdout_range" in splits and splits & {"group", "time"}


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
    limits = " ".join(bullets)
    assert "CPU" in limits and "seconds" in limits and "MB of memory" in limits
    assert (EXAMPLES / task / "Evaluation.md").read_text().startswith("# Evaluation\n")
    metric_section(task)


@pytest.mark.parametrize("task", TASKS)
def test_folder_loads_as_a_task_with_its_declared_config(task):
    loaded = load_task(EXAMPLES / task)
    cfg = config(task)
    name, direction = metric_section(task)
    assert loaded.metric.name == name
    assert loaded.metric.higher_is_better is (direction == "higher is better")
    r = loaded.resources
    assert (r.target, r.id_column, list(r.features)) == (cfg["target"], cfg["id_column"], features(task))
    assert r.kind == cfg.get("kind")
    if "validation" in cfg:
        assert r.validation is not None and r.validation.split == cfg["validation"]["split"]
        assert r.validation.column == cfg["validation"].get("column")
    assert r.prediction_columns == cfg["predictions"]["columns"]
    assert (r.limits.wall_seconds, r.limits.memory_mb) == (cfg["limits"]["wall_seconds"], cfg["limits"]["memory_mb"])


# --- the data agrees with Data_config.json ------------------------------------------------

@pytest.mark.parametrize("task", TASKS)
def test_data_config_matches_the_csv_files(task):
    cfg = config(task)
    task_dir = EXAMPLES / task
    train = pd.read_csv(task_dir / cfg["files"]["train"])
    test = pd.read_csv(task_dir / cfg["files"]["test_features"])
    targets = pd.read_csv(task_dir / HELDOUT)
    feats, target, id_col = features(task), cfg["target"], cfg["id_column"]
    assert list(train.columns) == feats + [target]
    assert list(test.columns) == [id_col] + feats
    assert list(targets.columns) == truth_columns(task)  # id, target, and what a per-series metric needs
    assert pd.api.types.is_integer_dtype(test[id_col]) and test[id_col].is_unique  # a plain int id
    assert test[id_col].tolist() == targets[id_col].tolist()
    assert set(cfg["predictions"]["columns"]) == {id_col, target}
    assert cfg["predictions"]["columns"][id_col] == "int"
    assert not train.isna().any().any() and not test.isna().any().any() and not targets.isna().any().any()
    assert set(cfg["limits"]) == {"wall_seconds", "cpu_seconds", "memory_mb"}
    assert 50 <= len(train) <= 5000 and 20 <= len(test) <= 5000  # small: runs in minutes on a CPU


@pytest.mark.parametrize("task", [t for t in TASKS if is_classification(t)])
def test_classification_labels_are_integers_seen_in_training(task):
    cfg = config(task)
    train = pd.read_csv(EXAMPLES / task / cfg["files"]["train"])
    heldout = truth_frame(task)
    target = cfg["target"]
    assert cfg["predictions"]["columns"][target] == "int"
    assert pd.api.types.is_integer_dtype(train[target]) and pd.api.types.is_integer_dtype(heldout[target])
    assert set(heldout[target]) <= set(train[target])
    assert train[target].nunique() >= 2


@pytest.mark.parametrize("task", [t for t in TASKS if "validation" in config(t)])
def test_the_official_split_is_the_one_declared(task):
    """The declared in-loop split mirrors how the test set was actually held out."""
    cfg = config(task)
    rule = cfg["validation"]
    train = pd.read_csv(EXAMPLES / task / cfg["files"]["train"])
    test = pd.read_csv(EXAMPLES / task / cfg["files"]["test_features"])
    if rule["split"] == "holdout_range":  # every test input lies beyond the training range
        col = rule["column"]
        if rule.get("side", "upper") == "upper":
            assert test[col].min() >= train[col].max()
        else:
            assert test[col].max() <= train[col].min()
    elif rule["split"] == "group":  # whole groups held out
        col = rule["column"]
        assert not set(test[col]) & set(train[col])
        assert train[col].nunique() >= rule.get("folds", 5)
    elif rule["split"] == "time":  # the test set comes after the training set
        col = rule["column"]
        assert test[col].min() > train[col].max()


@pytest.mark.parametrize("task", [t for t in TASKS if "constraints" in config(t)])
def test_declared_constraints_hold_on_the_data(task):
    cfg = config(task)
    bounds = cfg["constraints"]
    train = pd.read_csv(EXAMPLES / task / cfg["files"]["train"])
    for values in (train[cfg["target"]], truth_frame(task)[cfg["target"]]):
        if bounds.get("min") is not None:
            assert values.min() >= bounds["min"]
        if bounds.get("max") is not None:
            assert values.max() <= bounds["max"]
    assert set(bounds.get("monotone", {})) <= set(features(task))


# --- evaluate.py ---------------------------------------------------------------------------

@pytest.mark.parametrize("task", TASKS)
def test_perfect_predictions_score_perfectly(task, tmp_path):
    path = tmp_path / "predictions.csv"
    perfect_predictions(task).sample(frac=1.0, random_state=0).to_csv(path, index=False)  # order is free
    result = result_line(evaluate(task, path, in_process=False))  # the real command, as the engine runs it
    name, direction = metric_section(task)
    assert result["metric"] == name
    assert result["higher_is_better"] is (direction == "higher is better")
    assert result["n"] == len(truth_frame(task))
    assert math.isclose(result["value"], 1.0 if result["higher_is_better"] else 0.0, abs_tol=1e-12)


@pytest.mark.parametrize("task", TASKS)
def test_a_trivial_prediction_scores_the_documented_formula(task, tmp_path):
    cfg = config(task)
    truth = truth_frame(task)
    trivial = truth.assign(**{cfg["target"]: trivial_value(task)})
    trivial.to_csv(tmp_path / "trivial.csv", index=False)
    result = result_line(evaluate(task, tmp_path / "trivial.csv"))
    name, _ = metric_section(task)
    assert result["metric"] == name and result["n"] == len(truth)
    if name not in METRICS:
        pytest.skip(f"no independent formula for metric {name!r} in METRICS")
    expected = METRICS[name](trivial[cfg["target"]].to_numpy(), truth[cfg["target"]].to_numpy())
    assert math.isclose(result["value"], expected, rel_tol=1e-9, abs_tol=1e-12)
    perfect = 1.0 if result["higher_is_better"] else 0.0
    assert result["value"] != perfect  # a constant is not a perfect answer on any example


@pytest.mark.parametrize("task", TASKS)
def test_truth_file_replaces_the_held_out_targets(task, tmp_path):
    cfg = config(task)
    target = cfg["target"]
    truth = training_truth(task)
    truth.to_csv(tmp_path / "fold_truth.csv", index=False)
    trivial = truth.assign(**{target: trivial_value(task)}).iloc[::-1]  # any row order
    trivial.to_csv(tmp_path / "trivial.csv", index=False)
    result = result_line(evaluate(task, tmp_path / "trivial.csv", "--truth", tmp_path / "fold_truth.csv",
                                  in_process=False))
    name, _ = metric_section(task)
    assert result["metric"] == name and result["n"] == len(truth)
    if name in METRICS:
        expected = METRICS[name](np.full(len(truth), trivial_value(task)), truth[target].to_numpy())
        assert math.isclose(result["value"], expected, rel_tol=1e-9, abs_tol=1e-12)

    truth.to_csv(tmp_path / "exact.csv", index=False)
    exact = result_line(evaluate(task, tmp_path / "exact.csv", "--truth", tmp_path / "fold_truth.csv"))
    assert math.isclose(exact["value"], 1.0 if exact["higher_is_better"] else 0.0, abs_tol=1e-12)

    # predictions for the held-out ids are not the fold's ids (some missing, or extra ones where the
    # test grid's ids include every fold id): the truth file decides
    perfect_predictions(task).to_csv(tmp_path / "heldout_ids.csv", index=False)
    proc = evaluate(task, tmp_path / "heldout_ids.csv", "--truth", tmp_path / "fold_truth.csv")
    assert proc.returncode == 2 and proc.stdout == ""
    id_column = cfg["id_column"]
    uncovered = set(truth[id_column]) - set(truth_frame(task)[id_column])
    assert ("missing ids" if uncovered else "unexpected ids") in proc.stderr


@pytest.mark.parametrize("task", TASKS)
def test_bad_arguments_print_the_usage_and_exit_2(task, tmp_path):
    perfect_predictions(task).to_csv(tmp_path / "p.csv", index=False)
    for args in ((), (tmp_path / "p.csv", tmp_path / "p.csv"), (tmp_path / "p.csv", "--truth"),
                 (tmp_path / "p.csv", "--bogus")):
        proc = evaluate(task, *args)
        assert proc.returncode == 2, args
        assert proc.stdout == "" and "usage: evaluate.py" in proc.stderr and "--truth" in proc.stderr


@pytest.mark.parametrize("task", TASKS)
def test_an_unusable_truth_file_is_named(task, tmp_path):
    cfg = config(task)
    perfect_predictions(task).to_csv(tmp_path / "p.csv", index=False)
    proc = evaluate(task, tmp_path / "p.csv", "--truth", tmp_path / "absent.csv")
    assert proc.returncode == 2 and "absent.csv" in proc.stderr and "not found" in proc.stderr
    truth_frame(task).rename(columns={cfg["target"]: "other"}).to_csv(tmp_path / "wrong.csv", index=False)
    proc = evaluate(task, tmp_path / "p.csv", "--truth", tmp_path / "wrong.csv")
    assert proc.returncode == 2 and "wrong.csv" in proc.stderr and cfg["target"] in proc.stderr
    assert proc.stdout == ""


def _drop_row(df, target):
    return df.iloc[1:]


def _extra_id(df, target):
    return pd.concat([df, df.iloc[:1].assign(id=10**6)])


def _duplicate_id(df, target):
    out = df.copy()
    out.loc[out.index[1], "id"] = out["id"].iloc[0]
    return out


def _nan_value(df, target):
    out = df.astype({target: float})
    out.loc[out.index[3], target] = float("nan")
    return out


def _inf_value(df, target):
    out = df.astype({target: float})
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


def _fractional_id(df, target):
    return df.astype({"id": float}).assign(id=lambda d: d["id"] + 0.5)


MALFORMED = {
    "missing_row": (_drop_row, "missing ids"),
    "extra_id": (_extra_id, "unexpected ids"),
    "duplicate_id": (_duplicate_id, "duplicate ids"),
    "nan": (_nan_value, "NaN or inf"),
    "inf": (_inf_value, "NaN or inf"),
    "no_id_column": (_missing_id_column, "missing column"),
    "no_target_column": (_renamed_target, "missing column"),
    "text": (_text_value, "non-numeric"),
    "fractional_id": (_fractional_id, "integer ids"),
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


@pytest.mark.parametrize("task", [t for t in TASKS if is_classification(t)])
def test_classification_rejects_anything_but_a_known_label(task, tmp_path):
    target = config(task)["target"]
    perfect = perfect_predictions(task)
    classes = sorted(pd.read_csv(EXAMPLES / task / config(task)["files"]["train"])[target].unique())
    cases = {
        "not whole numbers": perfect.assign(**{target: perfect[target] + 0.4}),  # a regressor's output
        "unknown label": perfect.assign(**{target: max(classes) + 1}),
    }
    for message, frame in cases.items():
        frame.to_csv(tmp_path / "p.csv", index=False)
        proc = evaluate(task, tmp_path / "p.csv")
        assert proc.returncode == 2 and message in proc.stderr, (message, proc.stderr)
    perfect.astype({target: float}).to_csv(tmp_path / "p.csv", index=False)  # 2.0 is the label 2
    assert result_line(evaluate(task, tmp_path / "p.csv"))["value"] == 1.0


@pytest.mark.parametrize("task", TASKS)
def test_missing_or_empty_predictions_file_is_rejected(task, tmp_path):
    proc = evaluate(task, tmp_path / "nope.csv")
    assert proc.returncode == 2 and "not found" in proc.stderr
    (tmp_path / "empty.csv").write_text("")
    proc = evaluate(task, tmp_path / "empty.csv")
    assert proc.returncode == 2 and "could not parse" in proc.stderr


# --- provenance ----------------------------------------------------------------------------

@pytest.mark.parametrize("task", TASKS)
def test_make_data_is_deterministic(task, tmp_path):
    proc = subprocess.run([sys.executable, str(EXAMPLES / task / "make_data.py"), str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for rel in ("data/train.csv", "data/test_features.csv", HELDOUT):
        assert (tmp_path / rel).read_bytes() == (EXAMPLES / task / rel).read_bytes(), rel


# --- what individual examples promise -------------------------------------------------------

def test_example_sizes():
    assert len(pd.read_csv(EXAMPLES / "discontinuous-1d" / "data" / "train.csv")) == 200
    grid = pd.read_csv(EXAMPLES / "discontinuous-1d" / "data" / "test_features.csv")["x"]
    assert len(grid) == 1000 and grid.is_monotonic_increasing
    assert grid.iloc[0] == -1 and grid.iloc[-1] == 1
    train = pd.read_csv(EXAMPLES / "diabetes-progression" / "data" / "train.csv")
    test = pd.read_csv(EXAMPLES / "diabetes-progression" / "data" / "test_features.csv")
    assert len(train) + len(test) == 442 and len(test) == 88
    train = pd.read_csv(EXAMPLES / "wine-cultivar" / "data" / "train.csv")
    test = pd.read_csv(EXAMPLES / "wine-cultivar" / "data" / "test_features.csv")
    assert len(train) + len(test) == 178 and len(test) == 72


def test_discontinuous_targets_follow_the_documented_function():
    test = pd.read_csv(EXAMPLES / "discontinuous-1d" / "data" / "test_features.csv")
    truth = perfect_predictions("discontinuous-1d")
    x = test["x"].to_numpy()
    expected = np.where(x <= 0, 0.2 * np.sin(6 * x), 1 + 0.1 * x * np.cos(18 * x))
    assert np.allclose(truth["y"].to_numpy(), expected, atol=1e-10)


def test_pendulum_targets_are_the_exact_large_amplitude_period():
    from scipy.special import ellipk

    test = pd.read_csv(EXAMPLES / "pendulum-extrapolation" / "data" / "test_features.csv")
    truth = truth_frame("pendulum-extrapolation")["period_s"].to_numpy()
    small_angle = 2 * np.pi * np.sqrt(test["length_m"].to_numpy() / 9.81)
    exact = small_angle * 2 / np.pi * ellipk(np.sin(np.radians(test["amplitude_deg"].to_numpy()) / 2) ** 2)
    assert np.allclose(truth, exact, rtol=1e-9)
    assert (truth > small_angle).all()  # the amplitude lengthens every period


def test_the_mean_and_a_range_blind_model_lose_to_physics_on_the_pendulum():
    """The extrapolation example rewards the right functional form: a log-log fit in length with
    an even series in amplitude beats a model that cannot leave the training range."""
    from sklearn.ensemble import RandomForestRegressor
    from sklearn.linear_model import LinearRegression

    cfg = config("pendulum-extrapolation")
    train = pd.read_csv(EXAMPLES / "pendulum-extrapolation" / cfg["files"]["train"])
    test = pd.read_csv(EXAMPLES / "pendulum-extrapolation" / cfg["files"]["test_features"])
    truth = truth_frame("pendulum-extrapolation")["period_s"].to_numpy()

    def design(frame):
        a = np.radians(frame["amplitude_deg"].to_numpy())
        return np.column_stack([np.log(frame["length_m"]), a ** 2, a ** 4, a ** 6])

    physics = np.exp(LinearRegression().fit(design(train), np.log(train["period_s"])).predict(design(test)))
    forest = RandomForestRegressor(n_estimators=50, random_state=0).fit(train[features("pendulum-extrapolation")],
                                                                        train["period_s"])
    blind = forest.predict(test[features("pendulum-extrapolation")])
    assert _relative_l2(physics, truth) < 0.1 * _relative_l2(blind, truth)
    assert _relative_l2(blind, truth) < _relative_l2(np.full(len(truth), train["period_s"].mean()), truth)


def test_random_folds_flatter_a_site_memoriser_that_whole_site_folds_expose():
    """Why soil-respiration-sites declares a group split: a forest that can recognise sites
    scores far better on random folds than on held-out sites, and the official score (new
    sites) agrees with the group folds."""
    from sklearn.ensemble import RandomForestRegressor
    from sklearn.model_selection import GroupKFold, KFold, cross_val_score

    cfg = config("soil-respiration-sites")
    train = pd.read_csv(EXAMPLES / "soil-respiration-sites" / cfg["files"]["train"])
    x, y = train[features("soil-respiration-sites")], train[cfg["target"]]
    forest = RandomForestRegressor(n_estimators=50, random_state=0)
    random_rmse = -cross_val_score(forest, x, y, cv=KFold(4, shuffle=True, random_state=0),
                                   scoring="neg_root_mean_squared_error").mean()
    group_rmse = -cross_val_score(forest, x, y, cv=GroupKFold(4), groups=train["site"],
                                  scoring="neg_root_mean_squared_error").mean()
    test = pd.read_csv(EXAMPLES / "soil-respiration-sites" / cfg["files"]["test_features"])
    official = METRICS["rmse"](forest.fit(x, y).predict(test[x.columns]), truth_frame("soil-respiration-sites")[cfg["target"]].to_numpy())
    assert group_rmse > 1.3 * random_rmse
    assert abs(official - group_rmse) < abs(official - random_rmse)
