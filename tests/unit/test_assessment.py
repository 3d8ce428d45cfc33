"""One assessment interface (issue 27 item 1): one place decides a task's kind, every answer kind
cuts its own folds and writes their truth, and the fold cuts of a time or range split never part
rows measured at one value of the split column."""
import csv
import io
import json
from pathlib import Path

import pandas as pd
import pytest

from engine.assessment import assessment_for
from engine.baselines import predict
from engine.errors import TaskSpecError
from engine.plausibility import task_data
from engine.preflight import preflight
from engine.sandbox.subprocess_executor import SubprocessExecutor
from engine.task import load_task
from engine.validation import read_data

EVALUATE_RMSE = '''
import argparse, json, math, sys
from pathlib import Path
import pandas as pd
p = argparse.ArgumentParser(); p.add_argument("predictions")
p.add_argument("--truth", default=str(Path(__file__).parent / "heldout" / "test_targets.csv"))
a = p.parse_args()
t, q = pd.read_csv(a.truth), pd.read_csv(a.predictions)
m = t.merge(q, on="id", suffixes=("", "_p"))
if len(m) != len(t):
    print("ids do not match", file=sys.stderr); sys.exit(2)
print(json.dumps({"metric": "rmse", "value": math.sqrt(((m["y"] - m["y_p"]) ** 2).mean()),
                  "higher_is_better": False, "n": len(m), "truth_columns": list(t.columns)}))
'''


def _write(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def make_task(root: Path, train: list[dict], test: list[dict], *, metric="rmse", contract="float", extra=None,
              heldout: list[dict] | None = None) -> Path:
    d = root / "task"
    (d / "Problem.md").parent.mkdir(parents=True, exist_ok=True)
    (d / "Problem.md").write_text("# A task\n\n## Goal\nPredict y.\n\n## Context\nMeasured.\n")
    (d / "Requirements.md").write_text("# Requirements\n\n- CPU only\n")
    (d / "Evaluation.md").write_text(f"# Evaluation\n\n## Metric\nname: {metric}\ndirection: lower is better\n")
    (d / "evaluate.py").write_text(EVALUATE_RMSE)
    _write(d / "data" / "train.csv", train)
    _write(d / "data" / "test_features.csv", test)
    _write(d / "heldout" / "test_targets.csv", heldout or [{"id": r["id"], "y": 0} for r in test])
    config = {"files": {"train": "data/train.csv", "test_features": "data/test_features.csv"}, "target": "y",
              "id_column": "id", "predictions": {"file": "predictions.csv", "columns": {"id": "int", "y": contract}},
              **(extra or {})}
    (d / "Data_config.json").write_text(json.dumps(config))
    return d


# --- one place decides the kind -----------------------------------------------------------------
def test_an_int_contract_scored_by_rmse_is_a_regression_for_baselines_checks_and_preflight(tmp_path):
    """Targets 0-4 under an int contract, scored by rmse: the metric says what is scored. The
    baselines used to read it as classes (the majority label) while the checks read a regression."""
    train = [{"x": i, "y": i % 5} for i in range(40)]
    test = [{"id": k, "x": k + 0.5} for k in range(6)]
    task = load_task(make_task(tmp_path, train, test, contract="int"))
    assert assessment_for(task).kind().kind == "regression"
    assert "rmse" in assessment_for(task).kind().reason
    constant = predict(task, train, [{"id": "0", "x": "1"}])["constant"].decode().splitlines()[1]
    assert float(constant.split(",")[1]) == pytest.approx(2.0)  # the mean of 0..4, not a label
    assert task_data(task).kind == "regression"
    assert "task kind: regression" in task.description()
    report = preflight(task)
    assert "classification" not in " ".join(getattr(report, "warnings", []))


def test_an_undeclared_kind_is_stated_once_with_its_reason_in_what_every_role_reads(tmp_path):
    train = [{"x": i, "y": ["a", "b"][i % 2]} for i in range(20)]
    test = [{"id": k, "x": k} for k in range(4)]
    task = load_task(make_task(tmp_path, train, test, metric="score", contract="str"))
    assert "task kind: classification (the predictions contract gives 'y' as str)" in task.description()


# --- fold cuts keep ties together --------------------------------------------------------------
@pytest.mark.parametrize("validation", [{"split": "time", "column": "day", "folds": 3},
                                        {"split": "holdout_range", "column": "day", "fraction": 0.25, "folds": 2}])
def test_a_fold_never_splits_rows_with_the_same_value_of_its_split_column(tmp_path, validation):
    # five sensors read each day: a cut inside one day fits on some of its readings and validates others
    train = [{"day": day, "sensor": s, "y": day + s} for day in range(7) for s in range(5)]
    test = [{"id": k, "day": 7, "sensor": k} for k in range(5)]
    task = load_task(make_task(tmp_path, train, test, extra={"validation": validation}))
    data = read_data(task)
    folds = task.assessment().folds(task.assessment().plan(), data, seed=0)
    assert folds
    for fit, val in folds:
        fit_days = {data.rows[i]["day"] for i in fit}
        val_days = {data.rows[i]["day"] for i in val}
        assert val and not fit_days & val_days


# --- the series answer kind ---------------------------------------------------------------------
def _series_task(tmp_path: Path, horizon: int = 2, lengths=(10, 7, 12)) -> Path:
    train, test, heldout, k = [], [], [], 0
    for s, n in zip("abc", lengths):
        for t in range(n):
            train.append({"station": s, "week": t, "y": 10 * (ord(s) - 96) + t})
        for t in range(n, n + horizon):
            test.append({"id": k, "station": s, "week": t})
            heldout.append({"id": k, "y": 10 * (ord(s) - 96) + t})
            k += 1
    answer = {"kind": "series", "series": "station", "time": "week"}
    return make_task(tmp_path, train, test, extra={"answer": answer}, heldout=heldout)


def test_series_folds_validate_each_series_last_steps_and_fit_only_on_what_came_before(tmp_path):
    task = load_task(_series_task(tmp_path, horizon=2))
    assessment = assessment_for(task)
    assert assessment.name == "series"
    plan = task.assessment().plan()
    assert plan.split == "series" and "series" in plan.describe()
    data = read_data(task)
    folds = task.assessment().folds(plan, data, seed=0)
    assert len(folds) == 3
    for k, (fit, val) in enumerate(folds):
        by_series: dict[str, list[int]] = {}
        for i in val:
            by_series.setdefault(data.rows[i]["station"], []).append(int(data.rows[i]["week"]))
        assert all(len(weeks) == 2 for weeks in by_series.values())  # the horizon, per series
        for i in fit:  # nothing of a series at or after its validation block is fitted on
            row = data.rows[i]
            weeks = by_series.get(row["station"])
            assert weeks is None or int(row["week"]) < min(weeks)
        ends = {s: max(int(r["week"]) for r in data.rows if r["station"] == s) for s in by_series}
        assert all(max(w) == ends[s] - 2 * k for s, w in by_series.items())


def test_a_series_folds_truth_carries_the_series_and_time_for_a_per_series_metric(tmp_path):
    task = load_task(_series_task(tmp_path))
    split = task.assessment().split(tmp_path / "fold", seed=0, fold=0)
    truth = pd.read_csv(split.truth)
    assert list(truth.columns) == ["id", "y", "station", "week"]
    features = pd.read_csv(split.files["data/test_features.csv"])
    assert list(truth["station"]) == list(features["station"])
    assert list(truth["id"]) == list(range(len(truth)))


def test_series_baselines_are_per_series_persistence_and_mean(tmp_path):
    task = load_task(_series_task(tmp_path, horizon=2, lengths=(10, 7, 12)))
    trivial = assessment_for(task).trivial_predictions()
    assert set(trivial) == {"persistence", "series_mean"}
    persistence = pd.read_csv(io.BytesIO(trivial["persistence"]))
    test = pd.read_csv(task.folder / "data" / "test_features.csv")
    last = {"a": 19, "b": 26, "c": 41}  # 10*s + the last training week
    assert list(persistence["y"]) == [float(last[s]) for s in test["station"]]


def test_series_validation_scores_the_program_beside_the_per_series_baselines(tmp_path):
    task = load_task(_series_task(tmp_path))
    code = ("import csv\nrows = list(csv.DictReader(open('data/test_features.csv')))\n"
            "base = {'a': 10, 'b': 20, 'c': 30}\n"
            "with open('predictions.csv', 'w') as f:\n"
            "    f.write('id,y\\n' + ''.join(f\"{r['id']},{base[r['station']] + float(r['week'])}\\n\" for r in rows))\n")
    metric, _ = task.assessment().validate(code, SubprocessExecutor())
    assert metric["ok"], metric
    assert metric["value"] == pytest.approx(0.0, abs=1e-9)  # the exact law
    assert set(metric["baselines"]) == {"persistence", "series_mean"}
    assert metric["baselines"]["persistence"] > 0.5
    assert metric["validation"]["split"] == "series"


@pytest.mark.parametrize("answer, said", [
    ({"kind": "series", "series": "station"}, "answer.time must name a column"),
    ({"kind": "series", "series": "nope", "time": "week"}, "answer.series = 'nope' is not a column of the train file"),
    ({"kind": "series", "series": "station", "time": "week", "lag": 3}, "'answer' key(s) lag are not taken"),
    ({"kind": "forecasts"}, "answer.kind 'forecasts' is not one of rows, series, parameters"),
    ({"series": "station"}, "'answer' must be an object with a 'kind'"),
])
def test_a_broken_answer_block_is_refused_naming_what_is_wrong(tmp_path, answer, said):
    d = _series_task(tmp_path)
    config = json.loads((d / "Data_config.json").read_text())
    config["answer"] = answer
    (d / "Data_config.json").write_text(json.dumps(config))
    with pytest.raises(TaskSpecError) as err:
        load_task(d)
    assert said in str(err.value)


def test_every_answer_kinds_plan_is_a_valid_validation_event(tmp_path):
    """evolve announces the plan as a ValidationPlanned event: a series plan once failed its schema."""
    from engine.protocol.events import ValidationPlanned

    task = load_task(_series_task(tmp_path))
    plan = task.assessment().plan()
    event = ValidationPlanned(plan=plan.to_dict(), description=plan.describe())
    assert event.plan.split == "series"


@pytest.mark.parametrize("change, said", [
    ({"ranges": {"beta": [5.0, 0.01]}}, "answer.ranges['beta']: [5, 0.01] is not a range"),
    ({"ranges": {"beta": ["low", 1]}}, "answer.ranges['beta']: must be [low, high], two numbers"),
    ({"ranges": {"R0": [1, 3]}}, "answer.ranges names R0, not in answer.names"),
    ({"ranges": []}, "answer.ranges must map each parameter to [low, high]"),
    ({"time": ""}, "answer.time must name the column holding the law's time"),
])
def test_a_law_in_the_text_with_broken_ranges_or_time_is_refused(tmp_path, change, said):
    """examples/epidemic-sir states its law in Problem.md and its ranges in Data_config.json."""
    import shutil

    d = tmp_path / "sir"
    shutil.copytree(Path(__file__).resolve().parents[2] / "examples" / "epidemic-sir", d)
    config = json.loads((d / "Data_config.json").read_text())
    config["answer"].update(change)
    (d / "Data_config.json").write_text(json.dumps(config))
    with pytest.raises(TaskSpecError) as err:
        load_task(d)
    assert said in str(err.value)


def _answer_facts(assessment) -> dict:
    """What a kind's lines in the task description state, from the kind itself."""
    r = assessment.task.resources
    if assessment.name == "series":
        return {"series_column": assessment.series_column, "time_column": assessment.time_column,
                "horizon": assessment.horizon()}
    if assessment.name == "parameters":
        law = assessment.options.get("law")
        ranges = () if law else tuple((n, lo, hi) for n, (lo, hi) in assessment.ranges().items())
        return {"parameter_names": tuple(assessment.names), "reproduction_file": assessment.reproduction_file,
                "law_path": r.files.get(law, law) if law else "", "parameter_ranges": ranges}
    if assessment.name == "field":
        return {"query_path": assessment._rel("query"), "law_path": assessment._rel("law"),
                "observations_path": assessment._rel("observations") or ""}
    return {}


@pytest.mark.parametrize("folder", sorted(p for p in (Path(__file__).resolve().parents[2] / "examples").iterdir()
                                          if (p / "Data_config.json").is_file()), ids=lambda p: p.name)
def test_each_answer_kind_reads_back_the_lines_it_writes_and_no_other_kinds(folder):
    """Issue 38: a kind's lines in the task description and their reader live together
    (``deliverable``, ``read_deliverable``); whoever answers a prompt reads them with it."""
    from engine.assessment import ANSWER_KINDS
    from engine.prompt_format import task_sections

    task = load_task(folder)
    resources = task_sections(task.description())["Resources"]
    mine = task.assessment()
    read = {name: kind.read_deliverable(resources) for name, kind in ANSWER_KINDS.items()}
    assert read.pop(mine.name) == _answer_facts(mine)
    assert all(facts == {} for facts in read.values())
