"""The offline strategy library on real runs: rendered programs really run, train and score on
the example tasks; the discontinuity-aware fit wins where it should; injected first-draft bugs
make a run fail and are repaired from the traceback alone. The library's structure is tested
without running anything in tests/unit/test_strategies.py."""
from __future__ import annotations

import json
import math
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from engine.offline.strategy import BUG_KINDS, DataSpec, family_of
from engine.offline.analysis import render_analysis_script
from engine.offline.strategies import fix_bug, get_strategy, inject_bug, strategies_for
from tests.unit.test_strategies import EXAMPLES, SEED, TASKS, load_spec


def run_program(task: str, code: str, workdir: Path) -> subprocess.CompletedProcess:
    """Run ``code`` as main.py in ``workdir`` next to copies of the data (never heldout/)."""
    spec = load_spec(task)
    workdir.mkdir(parents=True, exist_ok=True)
    for rel in (spec.train_path, spec.test_path):
        (workdir / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(EXAMPLES / task / rel, workdir / rel)
    (workdir / "main.py").write_text(code)
    return subprocess.run([sys.executable, "main.py"], cwd=workdir, capture_output=True,
                          text=True, timeout=120)


def score(task: str, predictions: Path) -> dict:
    proc = subprocess.run([sys.executable, str(EXAMPLES / task / "evaluate.py"), str(predictions)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


# The PyTorch strategy trains for tens of seconds per run and both examples here rule it out (it is
# an option only where a task allows a network): its runs are in tests/integration/test_neural_strategy.py.
SWEEP = [(task, s.key) for task in TASKS for s in strategies_for(family_of(load_spec(task)))
         if "torch" not in s.requires]


@pytest.fixture(scope="module")
def sweep_results(tmp_path_factory):
    """(task, key) -> (process, score), each run once and shared between tests."""
    cache: dict[tuple[str, str], tuple[subprocess.CompletedProcess, dict | None]] = {}

    def get(task: str, key: str):
        if (task, key) not in cache:
            strategy = get_strategy(key)
            code = strategy.render(strategy.default_params(), load_spec(task), SEED)
            workdir = tmp_path_factory.mktemp(f"{task}-{key}")
            proc = run_program(task, code, workdir)
            result = score(task, workdir / "predictions.csv") if proc.returncode == 0 else None
            cache[task, key] = (proc, result)
        return cache[task, key]

    return get


# ---------------------------------------------------------------- real runs

@pytest.mark.slow
@pytest.mark.parametrize("task,key", SWEEP, ids=[f"{t}:{k}" for t, k in SWEEP])
def test_strategy_runs_and_scores(task, key, sweep_results):
    proc, result = sweep_results(task, key)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert result is not None and math.isfinite(result["value"])
    assert re.search(r"^validation_rmse: \d+\.\d+$", proc.stdout, re.M)
    assert re.search(r"^validation_r2: -?\d+\.\d+$", proc.stdout, re.M)
    assert "wrote" in proc.stdout


@pytest.mark.slow
def test_discontinuity_aware_fit_beats_the_global_polynomial(sweep_results):
    _, piecewise = sweep_results("discontinuous-1d", "piecewise_poly")
    _, poly = sweep_results("discontinuous-1d", "global_poly")
    assert piecewise["value"] < poly["value"]


@pytest.mark.slow
def test_discontinuity_aware_fit_is_the_best_1d_strategy(sweep_results):
    scores = {key: sweep_results(task, key)[1]["value"] for task, key in SWEEP if task == "discontinuous-1d"}
    assert min(scores, key=scores.get) == "piecewise_poly", scores


@pytest.mark.slow
def test_scaling_matters_for_knn_on_raw_tabular_data(sweep_results):
    _, scaled = sweep_results("diabetes-progression", "knn")
    _, raw = sweep_results("diabetes-progression", "knn_unscaled")
    assert scaled["value"] > raw["value"]  # R^2, higher is better


@pytest.mark.slow
def test_real_models_beat_the_constant_baseline(sweep_results):
    for task, better in (("discontinuous-1d", "piecewise_poly"), ("diabetes-progression", "ridge")):
        _, baseline = sweep_results(task, "mean_baseline")
        _, model = sweep_results(task, better)
        if model["higher_is_better"]:
            assert model["value"] > baseline["value"] + 0.2
        else:
            assert model["value"] < baseline["value"] / 10


@pytest.mark.slow
def test_same_seed_same_predictions(tmp_path):
    strategy = get_strategy("random_forest")
    code = strategy.render({"n_estimators": 200}, load_spec("discontinuous-1d"), SEED)
    outputs = []
    for name in ("a", "b"):
        proc = run_program("discontinuous-1d", code, tmp_path / name)
        assert proc.returncode == 0, proc.stderr
        outputs.append((tmp_path / name / "predictions.csv").read_bytes())
    assert outputs[0] == outputs[1]


@pytest.mark.parametrize("task", TASKS)
def test_analysis_script_prints_a_markdown_report(task, tmp_path):
    spec = load_spec(task)
    proc = run_program(task, render_analysis_script(spec), tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = proc.stdout
    assert report.startswith("# Exploratory data analysis")
    assert "training rows:" in report and "| column | mean | std | min | max |" in report
    assert "## Correlation with the target" in report
    for column in spec.features:
        assert f"| {column} |" in report
    if task == "discontinuous-1d":
        match = re.search(r"largest steep step between neighbouring sorted points: ([+-][\d.]+) "
                          r"between x = (\S+) and (\S+)", report)
        assert match and abs(float(match.group(1))) > 0.8
        assert float(match.group(2)) <= 0.0 <= float(match.group(3))
        assert "discontinuity" in report
    else:
        assert "scaling matters" in report


# ---------------------------------------------------------------- bugs and repairs

BUG_CASES = [(kind, task, key) for kind in BUG_KINDS
             for task, key in (("discontinuous-1d", "piecewise_poly"), ("diabetes-progression", "ridge"))]


@pytest.mark.slow
@pytest.mark.parametrize("kind,task,key", BUG_CASES, ids=[f"{k}-{s}" for k, _, s in BUG_CASES])
def test_injected_bug_fails_and_fix_repairs_it(kind, task, key, tmp_path):
    strategy = get_strategy(key)
    code = strategy.render(strategy.default_params(), load_spec(task), SEED)
    buggy, got_kind = inject_bug(code, random.Random(7), kind=kind)
    assert got_kind == kind and buggy != code

    broken = run_program(task, buggy, tmp_path / "broken")
    assert broken.returncode != 0
    assert not (tmp_path / "broken" / "predictions.csv").exists() or kind == "missing_id_column"

    fixed = fix_bug(buggy, broken.stderr)
    assert fixed is not None, broken.stderr[-1500:]
    repaired = run_program(task, fixed, tmp_path / "fixed")
    assert repaired.returncode == 0, repaired.stderr[-1500:]
    score(task, tmp_path / "fixed" / "predictions.csv")
    if kind != "missing_import":  # an import may come back at a different line
        assert fixed == code


# ---------------------------------------------------------------- tasks the examples do not cover

def _run_generated(workdir: Path, train, test, code: str) -> subprocess.CompletedProcess:
    (workdir / "data").mkdir(parents=True, exist_ok=True)
    train.to_csv(workdir / "data" / "train.csv", index=False)
    test.to_csv(workdir / "data" / "test_features.csv", index=False)
    (workdir / "main.py").write_text(code)
    return subprocess.run([sys.executable, "main.py"], cwd=workdir, capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_parametric_fits_extrapolate_a_law_where_trees_and_neighbours_go_flat(tmp_path):
    rng = np.random.default_rng(5)
    x = rng.uniform(0.2, 1.0, 120)
    train = pd.DataFrame({"id": range(120), "length": x, "period": 2.0 * x ** 0.5 * (1 + 0.01 * rng.normal(size=120))})
    far = np.linspace(1.2, 4.0, 40)
    test = pd.DataFrame({"id": range(1000, 1040), "length": far})
    spec = DataSpec("data/train.csv", "data/test_features.csv", "period", ("length",), "id", "predictions.csv",
                    extrapolate=True)
    errors = {}
    for key in ("power_law", "form_search", "random_forest", "knn"):
        proc = _run_generated(tmp_path / key, train, test, get_strategy(key).render({}, spec, SEED))
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert "validation: the upper 20% of training rows" in proc.stdout
        predicted = pd.read_csv(tmp_path / key / "predictions.csv")["period"].to_numpy()
        truth = 2.0 * far ** 0.5
        errors[key] = float(np.linalg.norm(predicted - truth) / np.linalg.norm(truth))
    assert max(errors["power_law"], errors["form_search"]) < 0.2 * min(errors["random_forest"], errors["knn"]), errors


@pytest.mark.slow
@pytest.mark.parametrize("label_type", ["int", "str"])
def test_classifiers_write_labels_of_the_contract_type_and_beat_the_majority(tmp_path, label_type):
    rng = np.random.default_rng(2)
    X = rng.normal(size=(300, 3))
    codes = (X[:, 0] + 0.5 * X[:, 1] > 0).astype(int) + (X[:, 2] > 0.8).astype(int)
    names = np.array(["low", "mid", "high"])
    labels = codes + 1 if label_type == "int" else names[codes]
    frame = pd.DataFrame({"id": range(300), "a": X[:, 0], "b": X[:, 1], "c": X[:, 2], "label": labels})
    train, held = frame.iloc[:220], frame.iloc[220:]
    test = held.drop(columns="label")
    spec = DataSpec("data/train.csv", "data/test_features.csv", "label", ("a", "b", "c"), "id", "predictions.csv",
                    kind="classification", target_type=label_type)
    accuracy = {}
    for strategy in strategies_for("classification"):
        proc = _run_generated(tmp_path / strategy.key, train, test, strategy.render({}, spec, SEED))
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert re.search(r"^validation_accuracy: \d\.\d+$", proc.stdout, re.M)
        written = pd.read_csv(tmp_path / strategy.key / "predictions.csv", dtype=str)
        assert set(written["label"]) <= {str(v) for v in labels}  # "2", never "2.0"
        accuracy[strategy.key] = float((written["label"].to_numpy() == held["label"].astype(str).to_numpy()).mean())
    best = max(v for k, v in accuracy.items() if k != "majority_baseline")
    assert best > accuracy["majority_baseline"] + 0.2, accuracy


@pytest.mark.parametrize("bounds", [(0.0, None), (None, None)])
def test_a_declared_lower_bound_keeps_a_straying_fit_on_it(tmp_path, bounds):
    """Respiration-like data: a ridge fit extrapolated to cold sites goes negative; with the task's
    declared minimum the written predictions (and the program's own validation) stay on it."""
    rng = np.random.default_rng(3)
    temp = rng.uniform(5, 30, 150)
    train = pd.DataFrame({"id": range(150), "temp": temp, "moisture": rng.uniform(0, 1, 150),
                          "flux": 0.2 * np.exp(0.08 * temp) + 0.05 * rng.normal(size=150)})
    test = pd.DataFrame({"id": range(500, 540), "temp": np.linspace(-25, 0, 40), "moisture": 0.5})
    spec = DataSpec("data/train.csv", "data/test_features.csv", "flux", ("temp", "moisture"), "id",
                    "predictions.csv", bounds=bounds)
    proc = _run_generated(tmp_path, train, test, get_strategy("ridge").render({}, spec, SEED))
    assert proc.returncode == 0, proc.stderr[-2000:]
    predicted = pd.read_csv(tmp_path / "predictions.csv")["flux"].to_numpy()
    if bounds[0] is None:
        assert predicted.min() < 0 and "within_bounds" not in proc.stdout
    else:
        assert predicted.min() == 0.0
        assert re.search(r"^within_bounds: \d+ of 40 predictions moved onto the declared bounds$", proc.stdout, re.M)


def test_a_blend_predicts_the_mean_of_its_parts_and_votes_on_labels(tmp_path):
    from engine.offline.blend import BLEND

    rng = np.random.default_rng(4)
    X = rng.uniform(0, 1, size=(160, 2))
    frame = pd.DataFrame({"id": range(160), "a": X[:, 0], "b": X[:, 1],
                          "y": np.sin(4 * X[:, 0]) + X[:, 1] + 0.1 * rng.normal(size=160)})
    train, test = frame.iloc[:120], frame.iloc[120:].drop(columns="y")
    spec = DataSpec("data/train.csv", "data/test_features.csv", "y", ("a", "b"), "id", "predictions.csv")
    parts = [["ridge", {"alpha": 1.0}], ["extra_trees", {}]]
    alone = []
    for key, params in parts:
        proc = _run_generated(tmp_path / key, train, test, get_strategy(key).render(params, spec, SEED))
        assert proc.returncode == 0, proc.stderr[-2000:]
        alone.append(pd.read_csv(tmp_path / key / "predictions.csv")["y"].to_numpy())
    proc = _run_generated(tmp_path / "blend", train, test, BLEND.render({"parts": parts}, spec, SEED))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert re.search(r"^validation_rmse: \d", proc.stdout, re.M)
    blended = pd.read_csv(tmp_path / "blend" / "predictions.csv")["y"].to_numpy()
    assert np.allclose(blended, (alone[0] + alone[1]) / 2)

    labels = np.where(X[:, 0] + 0.3 * rng.normal(size=160) > 0.5, "high", "low")
    classes = pd.DataFrame({"id": range(160), "a": X[:, 0], "b": X[:, 1], "label": labels})
    spec = DataSpec("data/train.csv", "data/test_features.csv", "label", ("a", "b"), "id", "predictions.csv",
                    kind="classification", target_type="str")
    voters = [["logistic_regression", {}], ["random_forest_classifier", {}], ["knn_classifier", {}]]
    votes = []
    for key, params in voters:
        proc = _run_generated(tmp_path / f"c-{key}", classes.iloc[:120], classes.iloc[120:].drop(columns="label"),
                              get_strategy(key).render(params, spec, SEED))
        assert proc.returncode == 0, proc.stderr[-2000:]
        votes.append(pd.read_csv(tmp_path / f"c-{key}" / "predictions.csv")["label"].to_numpy())
    proc = _run_generated(tmp_path / "c-blend", classes.iloc[:120], classes.iloc[120:].drop(columns="label"),
                          BLEND.render({"parts": voters}, spec, SEED))
    assert proc.returncode == 0, proc.stderr[-2000:]
    voted = pd.read_csv(tmp_path / "c-blend" / "predictions.csv")["label"].to_numpy()
    expected = [max(row, key=list(row).count) for row in zip(*votes)]
    assert list(voted) == expected and set(voted) <= {"high", "low"}


@pytest.mark.parametrize("parts, why", [
    ([["ridge", {}]], "2 to 3 parts"),
    ([["ridge", {}], ["mean_baseline", {}]], "cannot be part of a blend"),
    ([["ridge", {}], ["blend", {}]], "cannot be part of a blend"),
    ([["ridge", {}], ["no_such_model", {}]], "no strategy of the library"),
    ([["ridge", {}], ["ridge", {"alpha": 1.0}]], "twice"),
    ([["ridge", {"alpha": 1.0, "bogus": 2}], ["svr", {}]], "unknown parameter"),
])
def test_a_blend_of_parts_it_cannot_render_is_a_clear_error(parts, why):
    from engine.offline.blend import BLEND

    spec = DataSpec("data/train.csv", "data/test_features.csv", "y", ("a", "b"), "id", "predictions.csv")
    with pytest.raises(ValueError, match=why):
        BLEND.render({"parts": parts}, spec, SEED)


def test_a_grouped_task_s_programs_never_learn_from_the_group_label(tmp_path):
    """Sites numbered at random, each with its own offset: the test holds new sites, so a model given
    the site code can only fit noise. The program leaves the code out although the task lists it."""
    rng = np.random.default_rng(8)
    site = np.repeat(np.arange(1, 13), 30)
    temp = rng.uniform(0, 25, site.size)
    flux = 0.3 * temp + rng.normal(0, 1.0, 12)[site - 1] + 0.2 * rng.normal(size=site.size)
    frame = pd.DataFrame({"id": range(site.size), "site": site, "temp": temp, "flux": flux})
    train, test = frame[frame.site <= 9], frame[frame.site > 9].drop(columns="flux")
    spec = DataSpec("data/train.csv", "data/test_features.csv", "flux", ("site", "temp"), "id", "predictions.csv",
                    group_column="site")
    proc = _run_generated(tmp_path, train, test, get_strategy("ridge").render({}, spec, SEED))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "site groups held out whole" in proc.stdout
    predicted = pd.read_csv(tmp_path / "predictions.csv")["flux"].to_numpy()
    # with the code dropped, ridge on temperature alone: one slope, the same for every new site
    slope = np.polyfit(test["temp"], predicted, 1)
    assert np.allclose(np.polyval(slope, test["temp"]), predicted, atol=1e-9)
    ungrouped = DataSpec("data/train.csv", "data/test_features.csv", "flux", ("site", "temp"), "id",
                         "predictions.csv")
    assert "GROUP_LABELS = []" in get_strategy("ridge").render({}, ungrouped, SEED)
