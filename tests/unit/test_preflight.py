"""Preflight: a task's data is checked against its Data_config.json, and evaluate.py's metric
name against Evaluation.md's, before any model is called; every problem names its file and column.

Task folders are built here (a small regression with a contract-following evaluate.py) and broken
one way at a time; the shipped examples must pass."""
import io
import json
import time
from pathlib import Path

import pytest

from engine.cli import main as engine_main
from engine.errors import TaskSpecError
from engine.preflight import PreflightError, StaticMetric, TaskFacts, preflight
from engine.task import load_task

# A contract-following evaluate.py (README 'Task folders'): optional --truth, one JSON line.
EVALUATE = '''
import argparse, json, math, sys
from pathlib import Path
import pandas as pd

METRIC, HIGHER = "rmse", False
parser = argparse.ArgumentParser()
parser.add_argument("predictions")
parser.add_argument("--truth", default=str(Path(__file__).parent / "heldout" / "test_targets.csv"))
args = parser.parse_args()
truth = pd.read_csv(args.truth)
pred = pd.read_csv(args.predictions)
if sorted(pred["id"]) != sorted(truth["id"]):
    print("ids do not match the truth", file=sys.stderr)
    sys.exit(2)
merged = truth.merge(pred, on="id", suffixes=("", "_pred"))
value = math.sqrt(((merged["y"] - merged["y_pred"]) ** 2).mean())
print(json.dumps({"metric": METRIC, "value": value, "higher_is_better": HIGHER, "n": len(merged)}))
'''


def _csv(path: Path, header: list[str], rows: list[list]) -> None:
    path.write_text("\n".join([",".join(header), *(",".join(str(v) for v in row) for row in rows)]) + "\n")


@pytest.fixture
def task_dir(tmp_path: Path) -> Path:
    d = tmp_path / "law"
    (d / "data").mkdir(parents=True)
    (d / "heldout").mkdir()
    (d / "Problem.md").write_text("# A smooth law\n\n## Goal\nPredict y from x1 and x2.\n\n## Context\nMeasured.\n")
    (d / "Requirements.md").write_text("# Requirements\n\n- CPU only\n")
    (d / "Evaluation.md").write_text("# Evaluation\n\n## Metric\nname: rmse\ndirection: lower is better\n")
    (d / "evaluate.py").write_text(EVALUATE)
    _csv(d / "data" / "train.csv", ["x1", "x2", "y"], [[i, i % 3, 2 * i + 1] for i in range(40)])
    _csv(d / "data" / "test_features.csv", ["id", "x1", "x2"], [[k, 40 + k, k % 3] for k in range(10)])
    _csv(d / "heldout" / "test_targets.csv", ["id", "y"], [[k, 81 + 2 * k] for k in range(10)])
    _config(d, {"files": {"train": "data/train.csv", "test_features": "data/test_features.csv"},
                "target": "y", "id_column": "id", "features": ["x1", "x2"],
                "predictions": {"file": "predictions.csv", "columns": {"id": "int", "y": "float"}}})
    return d


def _config(d: Path, cfg: dict | None = None, **changes) -> None:
    path = d / "Data_config.json"
    cfg = cfg if cfg is not None else json.loads(path.read_text())
    for key, value in changes.items():
        if value is None:
            cfg.pop(key, None)
        else:
            cfg[key] = value
    path.write_text(json.dumps(cfg))


def _problems(d: Path) -> list[str]:
    with pytest.raises(PreflightError) as info:
        preflight(load_task(d))
    assert isinstance(info.value, TaskSpecError)  # the commands already print these as one clear error
    return info.value.problems


def _one(problems: list[str], *words: str) -> str:
    hits = [p for p in problems if all(w in p for w in words)]
    assert hits, f"no problem mentions {words}: {problems}"
    return hits[0]


def test_a_sound_task_passes_with_its_facts(task_dir):
    facts = preflight(load_task(task_dir))
    assert isinstance(facts, TaskFacts)
    assert facts.kind == "regression" and facts.classes is None
    assert facts.features == ("x1", "x2") and (facts.n_train, facts.n_test) == (40, 10)
    assert (facts.target_min, facts.target_max, facts.target_mean) == (1.0, 79.0, 40.0)
    assert facts.feature_ranges["x1"].train_max == 39 and facts.feature_ranges["x1"].test_above == 10
    assert facts.beyond_training_range() == {"x1": "upper"}  # the test inputs lie beyond the training range
    assert facts.evaluate_metric == "rmse" and facts.evaluate_supports_truth and facts.warnings == []
    assert json.loads(json.dumps(facts.to_dict()))["beyond_training_range"] == {"x1": "upper"}


def test_a_few_test_rows_just_outside_a_random_split_are_not_extrapolation(task_dir):
    # 10 test rows inside the training range of x1 (0..39), one just above it
    _csv(task_dir / "data" / "test_features.csv", ["id", "x1", "x2"], [[k, 3 * k + 13, k % 3] for k in range(10)])
    facts = preflight(load_task(task_dir))
    assert facts.feature_ranges["x1"].test_above == 1 and facts.beyond_training_range() == {}
    assert facts.beyond_training_range(min_share=0.1) == {"x1": "upper"}


def test_missing_target_column_names_the_training_file_and_column(task_dir):
    _csv(task_dir / "data" / "train.csv", ["x1", "x2", "z"], [[i, i % 3, i] for i in range(40)])
    msg = _one(_problems(task_dir), "data/train.csv", "'y'")
    assert "target" in msg


def test_missing_id_column_names_the_test_file_and_column(task_dir):
    _csv(task_dir / "data" / "test_features.csv", ["x1", "x2"], [[40 + k, k % 3] for k in range(10)])
    msg = _one(_problems(task_dir), "data/test_features.csv", "'id'")
    assert "id column" in msg


def test_wrong_file_role_names_the_role_it_found(task_dir):
    _config(task_dir, files={"training": "data/train.csv", "test_features": "data/test_features.csv"})
    msg = _one(_problems(task_dir), "Data_config.json", "'train'")
    assert "'training'" in msg


def test_a_feature_only_in_the_training_file_is_refused(task_dir):
    _csv(task_dir / "data" / "train.csv", ["x1", "x2", "temperature", "y"],
         [[i, i % 3, 20 + i, 2 * i + 1] for i in range(40)])
    _config(task_dir, features=["x1", "x2", "temperature"])
    _one(_problems(task_dir), "data/test_features.csv", "'temperature'")


def test_features_default_to_the_test_files_columns(task_dir):
    _csv(task_dir / "data" / "train.csv", ["x1", "x2", "temperature", "y"],
         [[i, i % 3, 20 + i, 2 * i + 1] for i in range(40)])
    _config(task_dir, features=None)
    task = load_task(task_dir)
    assert task.resources.features == ("x1", "x2")
    assert "temperature" not in task.description()
    facts = preflight(task)
    assert facts.features == ("x1", "x2")
    assert any("'temperature'" in w and "not features" in w for w in facts.warnings)


def test_nans_are_counted_with_their_lines(task_dir):
    rows = [[i, i % 3, 2 * i + 1] for i in range(40)]
    rows[2][0], rows[7][0], rows[9][2] = "", "nan", "NA"
    _csv(task_dir / "data" / "train.csv", ["x1", "x2", "y"], rows)
    problems = _problems(task_dir)
    assert "2 missing" in _one(problems, "data/train.csv", "'x1'") and "4, 9" in _one(problems, "'x1'")
    assert "line(s) 11" in _one(problems, "data/train.csv", "target", "'y'")


def test_every_problem_is_reported_at_once(task_dir):
    _csv(task_dir / "data" / "train.csv", ["x1", "x2"], [[i, ""] for i in range(40)])
    _csv(task_dir / "data" / "test_features.csv", ["x1", "x2"], [[k, k] for k in range(10)])
    problems = _problems(task_dir)
    _one(problems, "data/train.csv", "'y'")
    _one(problems, "data/test_features.csv", "'id'")
    _one(problems, "data/train.csv", "'x2'", "missing")


def test_evaluate_py_printing_another_metric_name_is_refused(task_dir):
    (task_dir / "evaluate.py").write_text(EVALUATE.replace('METRIC, HIGHER = "rmse"', 'METRIC, HIGHER = "mae"'))
    msg = _one(_problems(task_dir), "evaluate.py", "'mae'")
    assert "Evaluation.md" in msg and "rmse" in msg


def test_evaluate_py_direction_must_match_evaluation_md(task_dir):
    (task_dir / "evaluate.py").write_text(EVALUATE.replace("HIGHER = \"rmse\", False", "HIGHER = \"rmse\", True"))
    _one(_problems(task_dir), "evaluate.py", "higher_is_better")


def test_evaluate_py_without_truth_is_a_warning_and_its_metric_is_still_read(task_dir):
    # the contract before issue 11: one argument, always scored against heldout/
    old = EVALUATE.replace("args = parser.parse_args()", "args = parser.parse_args(sys.argv[1:2])")
    old = old.replace('parser.add_argument("-' '-truth", default=', "parser.set_defaults(truth=")
    assert "--truth" not in old
    (task_dir / "evaluate.py").write_text(old)
    facts = preflight(load_task(task_dir))
    assert not facts.evaluate_supports_truth and facts.evaluate_metric == "rmse"
    assert any("does not support --truth" in w and "Task folders" in w for w in facts.warnings)
    (task_dir / "evaluate.py").write_text(old.replace('METRIC, HIGHER = "rmse"', 'METRIC, HIGHER = "r2"'))
    _one(_problems(task_dir), "evaluate.py", "'r2'")


def test_evaluate_py_that_crashes_is_reported_with_its_message(task_dir):
    (task_dir / "evaluate.py").write_text("import sys\nprint('no such column: label', file=sys.stderr)\nsys.exit(3)\n"
                                          "# accepts --truth\n")
    msg = _one(_problems(task_dir), "evaluate.py", "exited 3")
    assert "no such column: label" in msg


def test_integer_labels_scored_by_accuracy_are_a_classification_with_their_classes(task_dir):
    _csv(task_dir / "data" / "train.csv", ["x1", "x2", "y"], [[i, i % 3, int(i > 20)] for i in range(40)])
    _csv(task_dir / "heldout" / "test_targets.csv", ["id", "y"], [[k, 1] for k in range(10)])
    (task_dir / "Evaluation.md").write_text("# E\n\n## Metric\nname: accuracy\ndirection: higher is better\n")
    (task_dir / "evaluate.py").write_text(EVALUATE.replace('"rmse", False', '"accuracy", True'))
    facts = preflight(load_task(task_dir))  # a float contract for int labels is fine
    assert facts.kind == "classification" and facts.classes == [0, 1] and "accuracy" in facts.kind_source


def test_text_labels_under_an_int_contract_are_refused(task_dir):
    _csv(task_dir / "data" / "train.csv", ["x1", "x2", "y"],
         [[i, i % 3, "cat" if i % 2 else "dog"] for i in range(40)])
    _config(task_dir, kind="classification",
            predictions={"file": "predictions.csv", "columns": {"id": "int", "y": "int"}})
    _one(_problems(task_dir), "predictions.columns.y", "text", "str")


def test_kind_is_inferred_from_few_whole_labels_when_the_metric_does_not_say(task_dir):
    (task_dir / "Evaluation.md").write_text("# E\n\n## Metric\nname: house_score\ndirection: higher is better\n")
    (task_dir / "evaluate.py").write_text(EVALUATE.replace('"rmse", False', '"house_score", True'))
    _csv(task_dir / "data" / "train.csv", ["x1", "x2", "y"], [[i, i % 3, i % 4] for i in range(40)])
    _config(task_dir, predictions={"file": "predictions.csv", "columns": {"id": "int", "y": "int"}})
    facts = preflight(load_task(task_dir))
    assert facts.kind == "classification" and facts.classes == [0, 1, 2, 3]
    _config(task_dir, kind="regression")
    facts = preflight(load_task(task_dir))
    assert facts.kind == "regression" and facts.classes is None
    assert any("predictions.columns.y' is int for a regression" in w for w in facts.warnings)


def test_regression_with_a_text_target_is_refused(task_dir):
    rows = [[i, i % 3, 2 * i + 1] for i in range(40)]
    rows[5][2] = "high"
    _csv(task_dir / "data" / "train.csv", ["x1", "x2", "y"], rows)
    _config(task_dir, kind="regression")
    msg = _one(_problems(task_dir), "data/train.csv", "'y'", "not numeric")
    assert "'high'" in msg and "line 7" in msg


def test_test_file_holding_the_answers_is_refused(task_dir):
    _csv(task_dir / "data" / "test_features.csv", ["id", "x1", "x2", "y"], [[k, 40 + k, k % 3, 81] for k in range(10)])
    _one(_problems(task_dir), "data/test_features.csv", "'y'", "answers")


def test_duplicate_ids_and_empty_files(task_dir):
    _csv(task_dir / "data" / "test_features.csv", ["id", "x1", "x2"], [[k % 8, 40 + k, k % 3] for k in range(10)])
    _one(_problems(task_dir), "data/test_features.csv", "duplicate ids", "'0'", "'1'")
    _csv(task_dir / "data" / "test_features.csv", ["id", "x1", "x2"], [])
    _one(_problems(task_dir), "data/test_features.csv", "no rows")


def test_text_feature_against_numbers_and_ragged_rows(task_dir):
    rows = [[k, 40 + k, k % 3] for k in range(10)]
    rows[3][1] = "forty"
    _csv(task_dir / "data" / "test_features.csv", ["id", "x1", "x2"], rows)
    _one(_problems(task_dir), "data/test_features.csv", "'x1'", "'forty'", "line 5")
    (task_dir / "data" / "test_features.csv").write_text("id,x1,x2\n0,1,2\n1,2\n")
    _one(_problems(task_dir), "data/test_features.csv", "line 3", "2 field(s)")


def test_declared_validation_and_monotone_columns_must_exist(task_dir):
    _config(task_dir, validation={"split": "holdout_range", "column": "length"},
            constraints={"min": 0, "monotone": {"x9": "increasing"}})
    problems = _problems(task_dir)
    _one(problems, "data/train.csv", "'length'", "validation.column")
    _one(problems, "'x9'", "constraints.monotone")


def test_training_targets_outside_declared_bounds_are_a_warning(task_dir):
    _config(task_dir, constraints={"min": 5})
    facts = preflight(load_task(task_dir))
    assert any("2 value(s)" in w and "constraints.min" in w for w in facts.warnings)


def test_the_contract_must_carry_the_id_and_target(task_dir):
    _config(task_dir, predictions={"file": "predictions.csv", "columns": {"id": "int", "yhat": "float"}})
    _one(_problems(task_dir), "predictions.columns", "'y'")


def test_the_cli_stops_before_any_model_call_and_writes_no_run(task_dir, tmp_path, monkeypatch, capsys):
    from engine.gateway import ModelGateway

    def no_model(*args, **kwargs):
        raise AssertionError("a model was called before preflight stopped the run")

    monkeypatch.setattr(ModelGateway, "complete", no_model)
    _csv(task_dir / "data" / "train.csv", ["x1", "x2", "z"], [[i, i % 3, i] for i in range(40)])
    runs = tmp_path / "runs"
    assert engine_main(["run", str(task_dir), "--runs-dir", str(runs), "--verbose"]) == 2
    err = capsys.readouterr().err
    assert "fails preflight" in err and "data/train.csv" in err and "'y'" in err
    assert "Traceback" not in err
    assert not list(runs.glob("*/trace.jsonl"))


def test_run_task_command_prints_the_problems_without_a_traceback(task_dir, monkeypatch):
    from django.core.management import CommandError, call_command

    from engine.gateway import ModelGateway

    monkeypatch.setattr(ModelGateway, "complete", lambda *a, **k: pytest.fail("model called"))
    _csv(task_dir / "data" / "test_features.csv", ["x1", "x2"], [[40 + k, k % 3] for k in range(10)])
    for command in ("run_task", "evolve"):
        with pytest.raises(CommandError) as info:
            call_command(command, str(task_dir), stdout=io.StringIO())
        assert "data/test_features.csv" in str(info.value) and "'id'" in str(info.value)


def test_shipped_examples_pass_and_a_second_check_does_not_run_evaluate_py_again(examples, tmp_path, monkeypatch):
    import engine.preflight as module

    folders = sorted(p for p in examples.iterdir() if (p / "Data_config.json").is_file())
    monkeypatch.setattr(module, "_MEMO", {})  # what an earlier test left in this process would skip the disk
    for folder in folders:
        task = load_task(folder)
        facts = preflight(task, cache_dir=tmp_path / "cache")
        assert facts.evaluate_metric == task.metric.name, folder.name
        # a field has no training table: its answer follows from the stated law
        training = task.assessment().check_files() is None
        assert (facts.n_train > 0) == training and facts.n_test > 0 and facts.features, folder.name
    # A second check, even in a fresh process (nothing in memory), reads evaluate.py's answer
    # from the cache folder instead of starting it again.
    module._MEMO.clear()
    monkeypatch.setattr(module, "run_evaluate_py", lambda *a, **k: pytest.fail("evaluate.py started again"))
    for folder in folders:
        task = load_task(folder)
        assert preflight(task, cache_dir=tmp_path / "cache").evaluate_metric == task.metric.name, folder.name


# --- nothing waits for evaluate.py once a problem is known --------------------------------------------
# evaluate.py here would take a minute; the checks must answer long before (the bound is loose
# so that a loaded machine does not fail it: it tells "waited" from "did not wait", not a speed).
SLOW = "import time\ntime.sleep(60)\n"


def test_data_problems_are_reported_without_waiting_for_evaluate_py(task_dir):
    (task_dir / "evaluate.py").write_text(EVALUATE.replace("import pandas as pd\n", "import pandas as pd\n" + SLOW))
    _csv(task_dir / "data" / "test_features.csv", ["x1", "x2"], [[40 + k, k % 3] for k in range(10)])
    started = time.perf_counter()
    with pytest.raises(PreflightError) as info:
        preflight(load_task(task_dir))
    assert time.perf_counter() - started < 20
    _one(info.value.problems, "data/test_features.csv", "'id'")
    assert info.value.timings["evaluate"] < 20


def test_a_metric_name_mismatch_in_evaluate_py_source_is_reported_without_its_run(task_dir):
    slow = EVALUATE.replace("import pandas as pd\n", "import pandas as pd\n" + SLOW)
    (task_dir / "evaluate.py").write_text(slow.replace('METRIC, HIGHER = "rmse"', 'METRIC, HIGHER = "mae"'))
    started = time.perf_counter()
    problems = _problems(task_dir)
    assert time.perf_counter() - started < 20
    msg = _one(problems, "evaluate.py", "'mae'", "Evaluation.md")
    assert "read from its source" in msg and "rmse" in msg
    (task_dir / "evaluate.py").write_text(slow.replace('"rmse", False', '"rmse", True'))
    _one(_problems(task_dir), "higher_is_better: true", "read from its source")


def test_a_mismatch_only_the_run_can_see_is_still_caught(task_dir):
    # the name is computed: the source scan cannot be sure of it, so the run decides
    (task_dir / "evaluate.py").write_text(EVALUATE.replace('METRIC, HIGHER = "rmse", False',
                                                           'METRIC, HIGHER = "RMSE".lower().replace("rm", "ma"), False'))
    msg = _one(_problems(task_dir), "evaluate.py", "'mase'")
    assert "read from its source" not in msg


def test_a_source_the_scan_cannot_be_sure_of_is_left_to_the_run(task_dir):
    # another dict names another metric: the scan is unsure, and the run (which prints rmse) passes
    (task_dir / "evaluate.py").write_text(EVALUATE + '\nALIASES = {"metric": "mae", "why": "old name"}\n')
    facts = preflight(load_task(task_dir))
    assert facts.evaluate_metric == "rmse"
    assert facts.timings["evaluate"] > 0 and facts.timings["total"] >= facts.timings["data"]


@pytest.mark.parametrize("source, name, higher", [
    ('METRIC, HIGHER = "rmse", False\nprint(json.dumps({"metric": METRIC, "value": v, "higher_is_better": HIGHER}))',
     "rmse", False),
    ('M: str = "r2"\nprint(json.dumps({"metric": M, "value": v}))', "r2", None),
    ('print(json.dumps(dict(metric="mae", value=v, higher_is_better=False)))', "mae", False),
    # not certain: rebound, rebound in a function, a parameter, an f-string, set by subscript, two names
    ('METRIC = "rmse"\nif fast:\n    METRIC = "mae"\nprint(json.dumps({"metric": METRIC, "value": v}))', None, None),
    ('METRIC = "rmse"\ndef f():\n    global METRIC\n    METRIC = "x"\nprint(json.dumps({"metric": METRIC}))', None, None),
    ('def report(metric):\n    print(json.dumps({"metric": metric, "value": 1}))', None, None),
    ('print(f\'{{"metric": "r2", "value": {v}}}\')', None, None),
    ('out = {"metric": "rmse", "value": v}\nout["metric"] = args.name\nprint(json.dumps(out))', None, None),
    ('a = {"metric": "mae"}\nb = {"metric": "rmse"}', None, None),
    ('def broken(:', None, None),
])
def test_the_source_scan_reads_only_what_is_certain(source, name, higher):
    from engine.preflight import printed_metric

    assert printed_metric(source) == StaticMetric(name, higher)


def test_every_shipped_evaluate_py_is_read_from_its_source(examples):
    from engine.preflight import printed_metric

    for folder in sorted(p for p in examples.iterdir() if (p / "evaluate.py").is_file()):
        task = load_task(folder)
        assert printed_metric((folder / "evaluate.py").read_text()) == StaticMetric(
            task.metric.name, task.metric.higher_is_better), folder.name


def test_a_parameters_task_without_a_law_is_refused_before_a_model_is_called(examples, tmp_path):
    """Issue 39: a `parameters` task with no law file and no law Trellis can read in its text
    passed preflight, then failed after some 60,000 tokens of programs with nothing to fit. The
    epidemic example without its equations is refused now, naming why and how to state one."""
    import shutil

    d = tmp_path / "sir-without-law"
    shutil.copytree(examples / "epidemic-sir", d)
    problem = (d / "Problem.md").read_text()
    kept = [line for line in problem.splitlines() if "/dt" not in line and "(0)" not in line]
    (d / "Problem.md").write_text("\n".join(kept) + "\n")
    law = _one(_problems(d), "answer kind 'parameters'", "states none that Trellis can read")
    assert "answer.law" in law and "Problem.md" in law and "`I`" in law
    assert preflight(load_task(examples / "epidemic-sir")) is not None  # the law stated in its text is read
