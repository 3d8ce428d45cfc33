import json
from pathlib import Path

import pytest

from engine.errors import TaskSpecError
from engine.task import load_task


@pytest.fixture
def task_dir(tmp_path: Path) -> Path:
    d = tmp_path / "toy"
    (d / "data").mkdir(parents=True)
    (d / "Problem.md").write_text("# Toy problem\n\n## Goal\nPredict y from x.\n\n## Context\nA line.\n")
    (d / "Requirements.md").write_text("# Requirements\n\n- CPU only\n- finish in a minute\n")
    (d / "Evaluation.md").write_text("# Evaluation\n\n## Metric\nname: rmse\ndirection: lower is better\n\nRoot mean square error.\n")
    (d / "evaluate.py").write_text("print('{}')\n")
    (d / "data" / "train.csv").write_text("x,y\n1,2\n")
    (d / "Data_config.json").write_text(json.dumps({
        "files": {"train": "data/train.csv"}, "target": "y", "id_column": "id", "features": ["x"],
        "predictions": {"file": "predictions.csv", "columns": {"id": "int", "y": "float"}},
        "limits": {"wall_seconds": 30}}))
    return d


def test_a_valid_folder_loads_into_goal_context_constraints_resources(task_dir):
    task = load_task(task_dir)
    assert task.goal == "Predict y from x."
    assert task.context == "A line."
    assert task.constraints == ("CPU only", "finish in a minute")
    assert task.metric.name == "rmse" and not task.metric.higher_is_better
    assert task.resources.prediction_contract() == "csv[id:int, y:float]"
    assert task.resources.limits.wall_seconds == 30
    assert "data/train.csv" in task.description()


def _error(task_dir) -> TaskSpecError:
    with pytest.raises(TaskSpecError) as info:
        load_task(task_dir)
    return info.value


@pytest.mark.parametrize("name", ["Problem.md", "Requirements.md", "Evaluation.md", "evaluate.py"])
def test_missing_file_is_named(task_dir, name):
    (task_dir / name).unlink()
    err = _error(task_dir)
    assert err.file == name and "missing" in err.problem


def test_problem_without_goal(task_dir):
    (task_dir / "Problem.md").write_text("# Toy\n\n## Context\nno goal here\n")
    err = _error(task_dir)
    assert err.file == "Problem.md" and "Goal" in err.problem


def test_problem_without_title(task_dir):
    (task_dir / "Problem.md").write_text("## Goal\nx\n")
    assert "title" in _error(task_dir).problem


def test_requirements_without_bullets(task_dir):
    (task_dir / "Requirements.md").write_text("# Requirements\nBe good.\n")
    err = _error(task_dir)
    assert err.file == "Requirements.md" and "bullet" in err.problem


def test_evaluation_with_bad_direction(task_dir):
    (task_dir / "Evaluation.md").write_text("# Evaluation\n## Metric\nname: rmse\ndirection: smaller\n")
    err = _error(task_dir)
    assert err.file == "Evaluation.md" and "'smaller'" in err.problem


def test_broken_json_names_line_and_column(task_dir):
    (task_dir / "Data_config.json").write_text('{"files": {"train": "data/train.csv",}}')
    err = _error(task_dir)
    assert err.file == "Data_config.json" and "line 1" in err.problem


def test_data_file_that_does_not_exist(task_dir):
    cfg = json.loads((task_dir / "Data_config.json").read_text())
    cfg["files"]["test_features"] = "data/missing.csv"
    (task_dir / "Data_config.json").write_text(json.dumps(cfg))
    assert "data/missing.csv" in _error(task_dir).problem


def test_data_paths_cannot_escape_or_expose_heldout(task_dir):
    cfg = json.loads((task_dir / "Data_config.json").read_text())
    cfg["files"]["train"] = "../secrets.csv"
    (task_dir.parent / "secrets.csv").write_text("a\n")
    (task_dir / "Data_config.json").write_text(json.dumps(cfg))
    assert "outside the task folder" in _error(task_dir).problem
    (task_dir / "heldout").mkdir()
    (task_dir / "heldout" / "t.csv").write_text("id,y\n")
    cfg["files"]["train"] = "heldout/t.csv"
    (task_dir / "Data_config.json").write_text(json.dumps(cfg))
    assert "held-out" in _error(task_dir).problem


def test_unknown_keys_and_limits_are_rejected(task_dir):
    cfg = json.loads((task_dir / "Data_config.json").read_text())
    cfg["limts"] = {}
    (task_dir / "Data_config.json").write_text(json.dumps(cfg))
    assert "limts" in _error(task_dir).problem
    del cfg["limts"]
    cfg["limits"] = {"wall_second": 3}
    (task_dir / "Data_config.json").write_text(json.dumps(cfg))
    assert "wall_second" in _error(task_dir).problem


def test_not_a_folder(tmp_path):
    err = _error(tmp_path / "nope")
    assert "not a folder" in err.problem


def test_shipped_examples_load(examples):
    for folder in sorted(p for p in examples.iterdir() if p.is_dir()):
        task = load_task(folder)
        assert task.resources.files and task.resources.prediction_columns


def _config(task_dir, **changes) -> None:
    cfg = json.loads((task_dir / "Data_config.json").read_text())
    for key, value in changes.items():
        if value is None:
            cfg.pop(key, None)
        else:
            cfg[key] = value
    (task_dir / "Data_config.json").write_text(json.dumps(cfg))


def test_kind_validation_and_constraints_are_typed_and_shown_to_agents(task_dir):
    _config(task_dir, kind="regression",
            validation={"split": "holdout_range", "column": "x", "side": "upper", "fraction": 0.25},
            constraints={"min": 0, "max": None, "monotone": {"x": "increasing"}})
    r = load_task(task_dir).resources
    assert r.kind == "regression"
    assert (r.validation.split, r.validation.column, r.validation.side, r.validation.fraction,
            r.validation.folds) == ("holdout_range", "x", "upper", 0.25, 3)
    assert r.constraints.min == 0 and r.constraints.max is None and r.constraints.monotone == {"x": "increasing"}
    text = load_task(task_dir).description()
    assert "task kind: regression" in text and "`y` >= 0" in text and "`y` increasing in `x`" in text
    assert "holdout_range on `x`" in text


@pytest.mark.parametrize("split, folds", [("kfold", 5), ("group", 5), ("time", 3)])
def test_each_split_has_its_default_folds(task_dir, split, folds):
    _config(task_dir, validation={"split": split} | ({} if split == "kfold" else {"column": "x"}))
    policy = load_task(task_dir).resources.validation
    assert policy.split == split and policy.folds == folds
    assert policy.column == (None if split == "kfold" else "x") and policy.side is None


def test_undeclared_policy_and_constraints_are_none(task_dir):
    r = load_task(task_dir).resources
    assert r.kind is None and r.validation is None and r.constraints is None


@pytest.mark.parametrize("key, value, named", [
    ("kind", "classifier", "'kind'"),
    ("validation", {"split": "random"}, "'validation.split'"),
    ("validation", "kfold", "'validation'"),
    ("validation", {"split": "holdout_range"}, "'validation.column'"),
    ("validation", {"split": "holdout_range", "column": "x", "side": "top"}, "'validation.side'"),
    ("validation", {"split": "holdout_range", "column": "x", "fraction": 1.5}, "'validation.fraction'"),
    ("validation", {"split": "holdout_range", "column": "x", "fraction": "20%"}, "'validation.fraction'"),
    ("validation", {"split": "kfold", "folds": 1}, "'validation.folds'"),
    ("validation", {"split": "kfold", "folds": 2.5}, "'validation.folds'"),
    ("validation", {"split": "kfold", "column": "x"}, "column"),
    ("constraints", {"min": "0"}, "'constraints.min'"),
    ("constraints", {"max": float("nan")}, "'constraints.max'"),
    ("constraints", {"min": 5, "max": 1}, "'constraints.min'"),
    ("constraints", {"monotone": {"x": "up"}}, "'constraints.monotone.x'"),
    ("constraints", {"monotone": ["x"]}, "'constraints.monotone'"),
    ("constraints", {"minimum": 0}, "minimum"),
])
def test_invalid_new_keys_name_the_key(task_dir, key, value, named):
    _config(task_dir, **{key: value})
    err = _error(task_dir)
    assert err.file == "Data_config.json" and named in err.problem


def test_omitted_features_are_the_test_files_columns_not_the_training_files(task_dir):
    (task_dir / "data" / "train.csv").write_text("x,temperature,y\n1,20,2\n")
    (task_dir / "data" / "test_features.csv").write_text("id,x\n0,1\n")
    _config(task_dir, features=None, files={"train": "data/train.csv", "test_features": "data/test_features.csv"})
    task = load_task(task_dir)
    assert task.resources.features == ("x",) and not task.resources.features_declared
    assert "feature columns: `x`" in task.description() and "temperature" not in task.description()
