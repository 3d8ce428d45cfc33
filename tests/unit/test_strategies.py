"""The offline strategy library's structure, read without running anything: families, tags,
parameter grids, rendered programs that parse, import only the scientific stack and describe
themselves; bug injection and repair rules. Rendered programs really running and scoring are in
tests/integration/test_strategies.py."""
from __future__ import annotations

import ast
import json
import random
import re
from dataclasses import replace
from pathlib import Path

import pytest

from engine.offline.strategy import BUG_KINDS, FAMILIES, TAG_VOCABULARY, DataSpec, family_of, spec_of_task
from engine.offline.strategies import STRATEGIES, fix_bug, get_strategy, inject_bug, parse_strategy_header, strategies_for
from engine.task import load_task

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
TASKS = ("discontinuous-1d", "diabetes-progression")
SEED = 0


def load_spec(task: str) -> DataSpec:
    return spec_of_task(load_task(EXAMPLES / task))


# Specs the examples do not cover: labels, extrapolation, groups, no feature list.
LABELS = DataSpec("data/train.csv", "data/test_features.csv", "label", ("a", "b"), "id", "predictions.csv",
                  kind="classification", target_type="int")
OTHER_SPECS = (
    LABELS,
    replace(LABELS, target_type="str", features=()),
    DataSpec("data/train.csv", "data/test_features.csv", "period", ("length",), "id", "predictions.csv",
             extrapolate=True),
    DataSpec("data/train.csv", "data/test_features.csv", "flux", ("site", "temp"), "id", "predictions.csv",
             group_column="site"),
)


def test_family_of():
    assert family_of(load_spec("discontinuous-1d")) == "regression_1d"
    assert family_of(load_spec("diabetes-progression")) == "tabular_regression"
    assert family_of(LABELS) == family_of(replace(LABELS, features=("a",))) == "classification"


def test_library_covers_the_required_approaches():
    one_d = {s.key for s in strategies_for("regression_1d")}
    tabular = {s.key for s in strategies_for("tabular_regression")}
    assert {"global_poly", "knn", "random_forest", "extra_trees", "gradient_boosting", "mlp",
            "smoothing_spline", "piecewise_poly"} <= one_d
    assert {"ridge", "lasso", "knn", "knn_unscaled", "random_forest", "gradient_boosting",
            "hist_gradient_boosting", "svr", "poly_ridge", "stacking_ensemble"} <= tabular
    assert {"low_poly", "power_law", "form_search", "symbolic_regression"} <= one_d
    assert {"power_law", "form_search", "symbolic_regression"} <= tabular
    classify = {s.key for s in strategies_for("classification")}
    assert {"logistic_regression", "random_forest_classifier", "gradient_boosting_classifier",
            "knn_classifier", "majority_baseline"} <= classify
    assert not classify & (one_d | tabular)  # a regressor never answers a classification task
    # What extrapolates is tagged so: parametric forms, never trees or neighbours.
    for strategy in STRATEGIES:
        if "extrapolation" in strategy.tags:
            assert not strategy.tags & {"trees", "nonparametric", "kernel"}, strategy.key
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
        for spec in [load_spec(task) for task in TASKS] + list(OTHER_SPECS):
            if family_of(spec) in strategy.families:
                for name, values in strategy.param_grid.items():
                    for value in values:  # vary one parameter at a time from the defaults
                        yield strategy, spec, {**strategy.default_params(), name: value}


def test_rendered_programs_are_valid_safe_and_self_describing():
    banned = re.compile(r"\b(subprocess|socket|urllib|requests|joblib|multiprocessing|"
                        r"threading|shutil|open\()|n_jobs=(?!1\b)|\.\./")
    # trellis_train: Trellis's own training-job helper, put beside a program it runs as a job
    stack = {"os", "re", "json", "time", "warnings", "numpy", "pandas", "scipy", "sklearn", "trellis_train"}
    count = 0
    for strategy, spec, params in _every_rendering():
        code = strategy.render(params, spec, SEED)
        count += 1
        # Beyond the scientific stack only what the strategy declares (a task may rule it out).
        allowed_roots = stack | {package.replace("-", "_") for package in strategy.requires}
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


def test_programs_validate_as_the_task_is_scored_and_write_the_contract_s_type():
    ridge, logistic = get_strategy("ridge"), get_strategy("logistic_regression")
    assert "permutation(len(X))" in ridge.render({}, load_spec("diabetes-progression"), 0)
    tail = get_strategy("form_search").render({}, OTHER_SPECS[2], 0)
    assert "def extrapolation_direction" in tail and "permutation(len(X))" not in tail
    assert "GROUP_COLUMN = 'site'" in ridge.render({}, OTHER_SPECS[3], 0)
    ints, strs = logistic.render({}, LABELS, 0), logistic.render({}, OTHER_SPECS[1], 0)
    assert ".astype(np.int64)" in ints and "values.astype(str)" in strs
    assert "y = train[TARGET].to_numpy()\n" in ints  # labels keep their type while fitting
    assert "validation_accuracy" in ints and "validation_rmse" not in ints
    with pytest.raises(ValueError):
        ridge.render({}, LABELS, 0)  # a regressor is not rendered for labels


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
