"""The offline strategy library: rendered programs really run, train and score on the
example tasks; the discontinuity-aware fit wins where it should; injected first-draft
bugs make a run fail and are repaired from the traceback alone."""
from __future__ import annotations

import ast
import json
import math
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from engine.offline.strategies import (  # noqa: E402
    BUG_KINDS, FAMILIES, STRATEGIES, TAG_VOCABULARY, DataSpec, family_of, fix_bug, get_strategy,
    inject_bug, parse_strategy_header, render_analysis_script, strategies_for,
)

EXAMPLES = ROOT / "examples"
TASKS = ("discontinuous-1d", "diabetes-progression")
SEED = 0


def load_spec(task: str) -> DataSpec:
    cfg = json.loads((EXAMPLES / task / "Data_config.json").read_text())
    return DataSpec(train_path=cfg["files"]["train"], test_path=cfg["files"]["test_features"],
                    target=cfg["target"], features=tuple(cfg["features"]),
                    id_column=cfg["id_column"], predictions_file=cfg["predictions"]["file"])


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


SWEEP = [(task, s.key) for task in TASKS for s in strategies_for(family_of(load_spec(task)))]


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


# ---------------------------------------------------------------- library structure

def test_family_of():
    assert family_of(load_spec("discontinuous-1d")) == "regression_1d"
    assert family_of(load_spec("diabetes-progression")) == "tabular_regression"


def test_library_covers_the_required_approaches():
    one_d = {s.key for s in strategies_for("regression_1d")}
    tabular = {s.key for s in strategies_for("tabular_regression")}
    assert {"global_poly", "knn", "random_forest", "extra_trees", "gradient_boosting", "mlp",
            "smoothing_spline", "piecewise_poly"} <= one_d
    assert {"ridge", "lasso", "knn", "knn_unscaled", "random_forest", "gradient_boosting",
            "hist_gradient_boosting", "svr", "poly_ridge", "stacking_ensemble"} <= tabular
    with pytest.raises(ValueError):
        strategies_for("image_classification")


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.key)
def test_strategy_metadata(strategy):
    assert strategy.families and strategy.families <= set(FAMILIES)
    assert strategy.tags and strategy.tags <= TAG_VOCABULARY
    assert strategy.param_grid and all(isinstance(v, tuple) and v for v in strategy.param_grid.values())
    hash(strategy)  # frozen and hashable, so it can key caches and sets


def _every_rendering():
    for strategy in STRATEGIES:
        for task in TASKS:
            spec = load_spec(task)
            if family_of(spec) in strategy.families:
                for name, values in strategy.param_grid.items():
                    for value in values:  # vary one parameter at a time from the defaults
                        yield strategy, spec, {**strategy.default_params(), name: value}


def test_rendered_programs_are_valid_safe_and_self_describing():
    banned = re.compile(r"\b(subprocess|socket|urllib|requests|joblib|multiprocessing|"
                        r"threading|shutil|open\()|n_jobs=(?!1\b)|\.\./")
    allowed_roots = {"os", "time", "warnings", "numpy", "pandas", "scipy", "sklearn"}
    count = 0
    for strategy, spec, params in _every_rendering():
        code = strategy.render(params, spec, SEED)
        count += 1
        assert code.split("\n")[0] == f"# strategy: {strategy.key} {json.dumps(params, sort_keys=True)}"
        assert parse_strategy_header(code) == (strategy.key, json.loads(json.dumps(params)))
        tree = ast.parse(code)
        assert ast.get_docstring(tree)
        assert not banned.search(code), (strategy.key, banned.search(code).group(0))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                assert {a.name.split(".")[0] for a in node.names} <= allowed_roots
            elif isinstance(node, ast.ImportFrom):
                assert node.module.split(".")[0] in allowed_roots
        # Every imported name is used, so dropping any import makes the run fail.
        for node in tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    name = alias.asname or alias.name.split(".")[0]
                    uses = [n for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == name]
                    assert uses, f"{strategy.key}: unused import {name}"
    assert count > 100


def test_render_is_deterministic_and_checks_its_inputs():
    spec = load_spec("discontinuous-1d")
    strategy = get_strategy("piecewise_poly")
    assert strategy.render({}, spec, 3) == strategy.render(strategy.default_params(), spec, 3)
    assert "SEED = 3" in strategy.render({}, spec, 3)
    with pytest.raises(ValueError):
        strategy.render({"no_such_param": 1}, spec, 0)
    with pytest.raises(ValueError):
        strategy.render({}, load_spec("diabetes-progression"), 0)  # 1-D only
    with pytest.raises(ValueError):
        strategy.render({"side_model": "wavelet"}, spec, 0)


# ---------------------------------------------------------------- real runs

@pytest.mark.parametrize("task,key", SWEEP, ids=[f"{t}:{k}" for t, k in SWEEP])
def test_strategy_runs_and_scores(task, key, sweep_results):
    proc, result = sweep_results(task, key)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert result is not None and math.isfinite(result["value"])
    assert re.search(r"^validation_rmse: \d+\.\d+$", proc.stdout, re.M)
    assert re.search(r"^validation_r2: -?\d+\.\d+$", proc.stdout, re.M)
    assert "wrote" in proc.stdout


def test_discontinuity_aware_fit_beats_the_global_polynomial(sweep_results):
    _, piecewise = sweep_results("discontinuous-1d", "piecewise_poly")
    _, poly = sweep_results("discontinuous-1d", "global_poly")
    assert piecewise["value"] < poly["value"]


def test_discontinuity_aware_fit_is_the_best_1d_strategy(sweep_results):
    scores = {key: sweep_results(task, key)[1]["value"] for task, key in SWEEP if task == "discontinuous-1d"}
    assert min(scores, key=scores.get) == "piecewise_poly", scores


def test_scaling_matters_for_knn_on_raw_tabular_data(sweep_results):
    _, scaled = sweep_results("diabetes-progression", "knn")
    _, raw = sweep_results("diabetes-progression", "knn_unscaled")
    assert scaled["value"] > raw["value"]  # R^2, higher is better


def test_real_models_beat_the_constant_baseline(sweep_results):
    for task, better in (("discontinuous-1d", "piecewise_poly"), ("diabetes-progression", "ridge")):
        _, baseline = sweep_results(task, "mean_baseline")
        _, model = sweep_results(task, better)
        if model["higher_is_better"]:
            assert model["value"] > baseline["value"] + 0.2
        else:
            assert model["value"] < baseline["value"] / 10


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
    for column in spec.features + (spec.target,):
        assert f"| {column} |" in report
    if task == "discontinuous-1d":
        match = re.search(r"largest jump between neighbouring sorted points: ([+-][\d.]+) "
                          r"between x = (\S+) and (\S+)", report)
        assert match and abs(float(match.group(1))) > 0.8
        assert float(match.group(2)) <= 0.0 <= float(match.group(3))
        assert "discontinuity" in report
    else:
        assert "scaling matters" in report


# ---------------------------------------------------------------- bugs and repairs

BUG_CASES = [(kind, task, key) for kind in BUG_KINDS
             for task, key in (("discontinuous-1d", "piecewise_poly"), ("diabetes-progression", "ridge"))]


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


def test_inject_bug_is_deterministic_and_varied():
    code = get_strategy("ridge").render({}, load_spec("diabetes-progression"), SEED)
    assert inject_bug(code, random.Random(1)) == inject_bug(code, random.Random(1))
    kinds = {inject_bug(code, random.Random(seed))[1] for seed in range(40)}
    assert kinds == set(BUG_KINDS)
    assert inject_bug("print('hello')\n", random.Random(0)) == ("print('hello')\n", "none")


def test_fix_bug_declines_errors_it_does_not_understand():
    code = get_strategy("ridge").render({}, load_spec("diabetes-progression"), SEED)
    assert fix_bug(code, "") is None
    assert fix_bug(code, "Killed\n") is None
    zero_division = ('Traceback (most recent call last):\n  File "/w/main.py", line 3, in <module>\n'
                     "    1 / 0\nZeroDivisionError: division by zero\n")
    assert fix_bug(code, zero_division) is None
    unknown_name = ('Traceback (most recent call last):\n  File "/w/main.py", line 3, in <module>\n'
                    "    frobnicate()\nNameError: name 'frobnicate' is not defined\n")
    assert fix_bug(code, unknown_name) is None
    unknown_key = ('Traceback (most recent call last):\n  File "/w/main.py", line 40, in load_data\n'
                   "    x\nKeyError: 'zzzzzz'\n")
    assert fix_bug(code, unknown_key) is None
