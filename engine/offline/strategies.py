"""Library of real modelling strategies for the offline provider.

Without a reachable model provider the engine still has to *do science*: the offline
scientist picks a strategy and hyperparameters from this library, renders a complete
Python program, and the sandbox really runs it (fit, validate, predict). The strategies
differ genuinely in quality, so a search over them can make real progress.

Also here: a small model of first-draft mistakes (``inject_bug``) together with the
debugger that repairs them from the traceback alone (``fix_bug``). The parametric, symbolic and
classification strategies live in parametric.py, symbolic.py and classifiers.py, the analyzer's
program in analysis.py.

Pure Python, no Django and no third-party imports: the *rendered* programs use numpy,
scipy, pandas and scikit-learn (and, where a strategy declares it in ``requires``, another
package: pyoperon for symbolic regression, torch for the mixture of experts in neural.py), but
this module only writes their source.
"""
from __future__ import annotations

import ast
import difflib
import json
import random
import re
from dataclasses import dataclass, field
from string import Template
from textwrap import dedent
from typing import TYPE_CHECKING

from .. import python_ast
from ..prompt_format import extract_strategy
from .analysis import render_analysis_script  # noqa: F401  (the analyzer's program; re-exported)

if TYPE_CHECKING:
    from ..task import Task

FAMILIES = ("regression_1d", "tabular_regression", "classification", "forecast", "parameters", "field")
ONE_D, TABULAR, CLASSIFY, FORECAST, PARAMETERS_FAMILY, FIELD_FAMILY = FAMILIES
TAG_VOCABULARY = frozenset({
    "discontinuity", "piecewise", "smooth", "nonparametric", "neural", "ensemble", "trees",
    "linear", "regularised", "scaling", "kernel", "baseline", "interpretable", "fast",
    "parametric", "extrapolation", "physics", "classifier", "symbolic",
})
BUG_KINDS = ("missing_import", "misspelled_column", "missing_id_column", "shape_error")


@dataclass(frozen=True)
class DataSpec:
    train_path: str          # relative path inside the program's working dir, e.g. "data/train.csv"
    test_path: str
    target: str
    features: tuple[str, ...]  # () : the program uses every test column but the id
    id_column: str
    predictions_file: str    # must contain columns (id_column, target)
    kind: str = "regression"   # "regression" | "classification"
    target_type: str = "float"  # the prediction contract's type for the target: float/int/str/bool
    extrapolate: bool = False  # scored beyond the training range: validate on the far tail
    group_column: str = ""     # scored on new groups of this column: validate on whole held-out groups
    # The target's declared physical bounds (Data_config.json constraints min/max; None: none).
    bounds: tuple[float | None, float | None] = (None, None)
    # A forecast of several series (answer kind "series"): the column naming each series, the
    # one ordering its steps, and the steps asked per series; "" / 0 for every other task.
    series_column: str = ""
    time_column: str = ""
    horizon: int = 0
    # A table of parameters (answer kind "parameters"): their names, the file reproducing the
    # test rows with them, and the law file (a path in the working dir); empty otherwise.
    parameter_names: tuple[str, ...] = ()
    reproduction_file: str = ""
    law_path: str = ""
    # Without a law file: the parameters' ranges and the law the task's text states, as source
    # (engine/offline/prose_law.py), or why none could be read.
    parameter_ranges: tuple[tuple[str, float, float], ...] = ()
    stated_law: str = ""
    stated_law_problem: str = ""
    # A field on a grid (answer kind "field"): the query points and the observations, if any.
    query_path: str = ""
    observations_path: str = ""


def spec_of_task(task: "Task") -> DataSpec:
    """The DataSpec a task folder declares (``engine.task.Task``): what the benchmarks and tests
    render programs for without going through a prompt, as the planner reads it from one."""
    from ..assessment import task_kind
    from .reading import read_facts

    r = task.resources
    policy = r.validation
    target_type = r.prediction_columns.get(r.target or "", "float")
    assessment = task.assessment()
    series = assessment.name == "series"
    parameters = assessment.name == "parameters"
    field_kind = assessment.name == "field"
    law_role = assessment.options.get("law") if parameters or field_kind else None
    # the law a task states in its text is read from its description, as the planner reads it
    prose = read_facts("", task.description()) if parameters and not law_role else None
    query = r.files.get(assessment.options.get("query", ""), "") if field_kind else ""
    return DataSpec(train_path=r.files.get("train", ""), test_path=r.files.get("test_features", query),
                    target=r.target or "",
                    features=tuple(r.features) if r.features_declared else (), id_column=r.id_column or "",
                    predictions_file=r.predictions_file, kind=task_kind(task).kind, target_type=target_type,
                    extrapolate=bool(policy and policy.split == "holdout_range"),
                    group_column=(policy.column or "") if policy and policy.split == "group" else "",
                    bounds=(r.constraints.min, r.constraints.max) if r.constraints else (None, None),
                    series_column=assessment.series_column if series else "",
                    time_column=assessment.time_column if series else "",
                    horizon=assessment.horizon() if series else 0,
                    parameter_names=tuple(assessment.names) if parameters else (),
                    reproduction_file=assessment.reproduction_file if parameters else "",
                    law_path=r.files.get(law_role, "") if law_role else "",
                    parameter_ranges=prose.parameter_ranges if prose else (),
                    stated_law=prose.stated_law if prose else "",
                    stated_law_problem=prose.stated_law_problem if prose else "",
                    query_path=query,
                    observations_path=r.files.get(assessment.options.get("observations", ""), "") if field_kind else "")


def family_of(spec: DataSpec) -> str:
    """Problem family: classification when the task asks for labels; otherwise one input variable
    is curve fitting and more is tabular regression."""
    if spec.kind == "classification":
        return CLASSIFY
    if spec.series_column:
        return FORECAST
    if spec.parameter_names:
        return PARAMETERS_FAMILY
    if spec.query_path:
        return FIELD_FAMILY
    return ONE_D if len(spec.features) == 1 else TABULAR


# --------------------------------------------------------------------------------------
# Program skeleton shared by every strategy. A strategy only supplies ``fit_predict``;
# loading, the validation split, scoring and writing predictions stay identical so that
# validation numbers are comparable across strategies.
# --------------------------------------------------------------------------------------
_FRAME = Template('''\
# strategy: $key $params_json
"""$title.

$summary

Reads $train_path and $test_path, scores itself on $validation_text,
refits on all training rows and writes $predictions_file.
Deterministic for SEED = $seed.
"""
import os

# One BLAS/OpenMP thread: results are reproducible and timings comparable between runs.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import time

import numpy as np
import pandas as pd
$imports

SEED = $seed
TRAIN_PATH = $train_path_repr
TEST_PATH = $test_path_repr
TARGET = $target_repr
FEATURES = $features_repr  # empty: every column of the test file but the id
ID_COLUMN = $id_column_repr
$group_labels
PREDICTIONS_FILE = $predictions_file_repr
VALIDATION_FRACTION = $val_fraction


def feature_columns(train, test):
    # Only columns both files have: a training-only column cannot be used to predict.
    columns = list(FEATURES) if FEATURES else [c for c in test.columns if c != ID_COLUMN and c in train.columns]
    return [c for c in columns if c not in GROUP_LABELS] or columns  # nothing else to learn from: keep it


def load_data():
    train = pd.read_csv(TRAIN_PATH)
    test = pd.read_csv(TEST_PATH)
    columns = feature_columns(train, test)
    X = train[columns].to_numpy(dtype=float)
    y = train[TARGET].to_numpy($y_dtype)
    X_test = test[columns].to_numpy(dtype=float)
    ids = test[ID_COLUMN].to_numpy()
    return X, y, X_test, ids


$body

$split

$scores

$bounds
$contract

$main

if __name__ == "__main__":
    main()
''')

# The frame's main(): validate on a hold-out split, then refit on every row. A strategy whose
# model trains in epochs brings its own (Strategy.main).
_FIT_THEN_REFIT = '''
def main():
    start = time.perf_counter()
    X, y, X_test, ids = load_data()
    print(f"train_rows: {X.shape[0]}  features: {X.shape[1]}  test_rows: {len(ids)}")

    # Score on a hold-out split first so the run leaves a number behind ...
    fit_rows, val_rows = holdout_split(X, X_test, SEED)
    report_scores(y[val_rows], within_bounds(fit_predict(X[fit_rows], y[fit_rows], X[val_rows])))

    # ... then refit on every training row for the submission.
    predictions = as_contract(within_bounds(fit_predict(X, y, X_test)))
    out = pd.DataFrame({ID_COLUMN: ids, TARGET: predictions})
    out.to_csv(PREDICTIONS_FILE, index=False)
    check_predictions(len(ids))
    print(f"wrote {len(out)} predictions to {PREDICTIONS_FILE}")
    print(f"elapsed_seconds: {time.perf_counter() - start:.2f}")
'''

_RANDOM_SPLIT = '''
def holdout_split(X, X_test, seed):
    """Random (fit, validation) index split of the training rows."""
    order = np.random.default_rng(seed).permutation(len(X))
    n_val = max(1, int(round(VALIDATION_FRACTION * len(X))))
    return order[n_val:], order[:n_val]
'''

# The test inputs lie beyond the training range: a random split would measure interpolation,
# so the program validates on the training rows nearest the side the test set extends past.
_TAIL_SPLIT = '''
def extrapolation_direction(X, X_test):
    """(feature index, "upper" or "lower"): where the test inputs go furthest past the training range."""
    lo, hi = X.min(axis=0), X.max(axis=0)
    span = np.where(hi > lo, hi - lo, 1.0)
    above = (X_test.max(axis=0) - hi) / span
    below = (lo - X_test.min(axis=0)) / span
    up, down = int(np.argmax(above)), int(np.argmax(below))
    return (up, "upper") if above[up] >= below[down] else (down, "lower")


def holdout_split(X, X_test, seed):
    """(fit, validation) split that holds out the training tail the test set extends beyond."""
    column, side = extrapolation_direction(X, X_test)
    order = np.argsort(X[:, column] if side == "upper" else -X[:, column], kind="stable")
    n_val = max(1, int(round(VALIDATION_FRACTION * len(X))))
    print(f"validation: the {side} {VALIDATION_FRACTION:.0%} of training rows along feature {column}"
          " (the test set extrapolates there)")
    return order[:-n_val], order[-n_val:]
'''

# Rows come in groups (sites, patients) and the score is on new groups: hold out whole groups.
_GROUP_SPLIT = '''
def holdout_split(X, X_test, seed):
    """(fit, validation) split that holds out whole groups of GROUP_COLUMN."""
    groups = pd.read_csv(TRAIN_PATH)[GROUP_COLUMN].to_numpy()
    names = np.random.default_rng(seed).permutation(np.unique(groups))
    if len(names) < 2:
        order = np.random.default_rng(seed).permutation(len(X))
        n_val = max(1, int(round(VALIDATION_FRACTION * len(X))))
        return order[n_val:], order[:n_val]
    n_val = min(len(names) - 1, max(1, int(round(VALIDATION_FRACTION * len(names)))))
    held = np.isin(groups, names[:n_val])
    print(f"validation: {n_val} of {len(names)} {GROUP_COLUMN} groups held out whole")
    return np.flatnonzero(~held), np.flatnonzero(held)
'''

_REGRESSION_SCORES = '''
def report_scores(y_true, y_pred):
    residual = y_true - y_pred
    rmse = float(np.sqrt(np.mean(residual ** 2)))
    ss_tot = float(np.sum((y_true - y_true.mean()) ** 2))
    r2 = 1.0 - float(np.sum(residual ** 2)) / ss_tot if ss_tot > 0 else float("nan")
    rel_l2 = float(np.linalg.norm(residual) / max(np.linalg.norm(y_true), 1e-12))
    print(f"validation_rmse: {rmse:.6f}")
    print(f"validation_r2: {r2:.6f}")
    print(f"validation_rel_l2: {rel_l2:.6f}")


def check_predictions(n_expected):
    # Read the file back so a malformed submission fails here, not at scoring time.
    written = pd.read_csv(PREDICTIONS_FILE)[[ID_COLUMN, TARGET]]
    assert len(written) == n_expected, f"wrote {len(written)} rows, expected {n_expected}"
    assert np.isfinite(written[TARGET].to_numpy(dtype=float)).all(), "non-finite predictions"
'''

_CLASSIFICATION_SCORES = '''
def report_scores(y_true, y_pred):
    accuracy = float(np.mean(y_true == y_pred))
    # Balanced accuracy: the mean recall over classes, which a majority vote cannot inflate.
    recalls = [float(np.mean(y_pred[y_true == c] == c)) for c in np.unique(y_true)]
    print(f"validation_accuracy: {accuracy:.6f}")
    print(f"validation_balanced_accuracy: {float(np.mean(recalls)):.6f}")


def check_predictions(n_expected):
    # Read the file back so a malformed submission fails here, not at scoring time.
    written = pd.read_csv(PREDICTIONS_FILE)[[ID_COLUMN, TARGET]]
    assert len(written) == n_expected, f"wrote {len(written)} rows, expected {n_expected}"
    assert written[TARGET].notna().all(), "missing labels"
'''

# Predictions written in the contract's type: labels stay labels, an int column gets integers.
_CONTRACT = {
    "float": "values.astype(float)",
    "int": "np.rint(values.astype(float)).astype(np.int64)",
    "str": "values.astype(str)",
    "bool": "values.astype(bool)",
}
# A task that declares physical bounds on its target (a rate >= 0, a fraction <= 1) gets
# predictions inside them, as a scientist would clip a fit that strays past a known limit; the
# count moved is printed so the log shows how far the model strayed. Labels are never clipped.
_BOUNDS_FN = '''
LOWER, UPPER = {low!r}, {high!r}  # the target's declared bounds (Data_config.json constraints)


def within_bounds(values):
    """Predictions moved onto the task's declared bounds; how many moved is printed."""
    values = np.asarray(values, dtype=float)
    clipped = np.clip(values, LOWER, UPPER)
    moved = int(np.count_nonzero(clipped != values))
    if moved:
        print(f"within_bounds: {{moved}} of {{len(values)}} predictions moved onto the declared bounds")
    return clipped
'''
_NO_BOUNDS_FN = '''
def within_bounds(values):
    return values  # {why}
'''
_CONTRACT_FN = '''
def as_contract(values):
    """Predictions in the type the contract asks for ({target_type})."""
    values = np.asarray(values)
    return {expression}
'''

VALIDATION_FRACTION = 0.2

# fit_predict for anything that follows the scikit-learn estimator API.
SKLEARN_FIT = '''
def fit_predict(X_train, y_train, X_new):
    model = make_model()
    model.fit(X_train, y_train)
    return model.predict(X_new)
'''

# Same, for estimators that may stop at max_iter by design (MLP, lasso).
SKLEARN_FIT_QUIET = '''
def fit_predict(X_train, y_train, X_new):
    model = make_model()
    with warnings.catch_warnings():
        # Stopping at max_iter is an accepted budget here, not an error worth reporting.
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(X_train, y_train)
    return model.predict(X_new)
'''

_QUIET_IMPORTS = ("import warnings", "from sklearn.exceptions import ConvergenceWarning")

# Smoothing splines need strictly increasing x; shared by two 1-D strategies.
_UNIQUE_SORTED = '''
def unique_sorted(x, y):
    """Sort by x and average the targets of repeated x values."""
    xs, inverse = np.unique(x, return_inverse=True)
    ys = np.bincount(inverse, weights=y) / np.bincount(inverse)
    return xs, ys
'''


@dataclass(frozen=True)
class Variant:
    """A piece of program that depends on one hyperparameter: value -> (imports, code).

    Rendering only the chosen option keeps programs free of dead branches, so every import a
    program carries is one it really executes (which makes a missing import always surface).
    """

    param: str
    options: dict[object, tuple[tuple[str, ...], str]]


@dataclass(frozen=True)
class Strategy:
    key: str
    title: str
    families: frozenset[str]
    tags: frozenset[str]
    param_grid: dict[str, tuple] = field(compare=False)
    summary: str = field(default="", compare=False)       # docstring text of the program
    imports: tuple[str, ...] = field(default=(), compare=False)  # one name per line
    body: tuple[str | Variant, ...] = field(default=(), compare=False)  # Template sources
    # Distributions beyond the scientific stack (numpy, scipy, pandas, scikit-learn) the program
    # imports, by their PyPI name: a task that allows only that stack rules the strategy out.
    requires: tuple[str, ...] = field(default=(), compare=False)
    # The program's own main() in place of the frame's fit-then-refit one: a model trained in
    # epochs validates as it trains and predicts with its best epoch (a Template source too).
    main: str = field(default="", compare=False)

    def default_params(self) -> dict:
        """First value of every grid entry: the cheap, conventional configuration a scientist
        tries first (the offline debugger falls back to it after a timeout)."""
        return {name: values[0] for name, values in self.param_grid.items()}

    def resolve_params(self, params: dict | None) -> dict:
        """Fill unspecified hyperparameters with defaults; reject unknown names."""
        params = dict(params or {})
        unknown = set(params) - set(self.param_grid)
        if unknown:
            raise ValueError(f"{self.key}: unknown parameter(s) {sorted(unknown)}")
        return {**self.default_params(), **params}

    def all_imports(self) -> tuple[str, ...]:
        """Every import line any configuration of this strategy may use."""
        lines = list(self.imports)
        for part in self.body:
            if isinstance(part, Variant):
                lines += [line for imports, _ in part.options.values() for line in imports]
        return tuple(dict.fromkeys(lines))

    def _assemble(self, resolved: dict) -> tuple[list[str], str, str]:
        imports, pieces = list(self.imports), []
        for part in self.body:
            if isinstance(part, Variant):
                choice = resolved[part.param]
                if choice not in part.options:
                    raise ValueError(f"{self.key}: {part.param}={choice!r} is not one of "
                                     f"{sorted(part.options, key=repr)}")
                extra, part = part.options[choice]
                imports += extra
            # Pieces are written at different indentation levels; dedent each one.
            pieces.append(dedent(part).strip("\n"))
        values = {name: repr(value) for name, value in resolved.items()}
        source = Template("\n\n\n".join(pieces)).substitute(values)
        main = Template(dedent(self.main).strip("\n") + "\n").substitute(values) if self.main else ""
        return list(dict.fromkeys(imports)), source, main

    def render(self, params: dict, spec: DataSpec, seed: int) -> str:
        """Complete, runnable program for ``spec``; the header records the resolved params."""
        if family_of(spec) not in self.families:
            raise ValueError(f"strategy {self.key!r} does not apply to {family_of(spec)} problems")
        resolved = self.resolve_params(params)
        imports, body, main = self._assemble(resolved)
        classify = spec.kind == "classification"
        tail = spec.extrapolate
        grouped = bool(spec.group_column) and not tail
        pct = int(round(100 * VALIDATION_FRACTION))
        split = _TAIL_SPLIT if tail else _GROUP_SPLIT if grouped else _RANDOM_SPLIT
        # The test rows come from groups the training rows never show (that is why validation holds
        # out whole groups), so a group's label says nothing about them: it is no feature, however
        # the task lists it (a site code read as a number would only teach the model noise).
        group_labels = (f"GROUP_COLUMN = {spec.group_column!r}\n"
                        "GROUP_LABELS = [GROUP_COLUMN]  # new groups at test time: their labels predict nothing"
                        if grouped else "GROUP_LABELS = []  # no column labels groups the test set never saw")
        if spec.series_column:
            group_labels += (f"\nSERIES_COLUMN = {spec.series_column!r}\nTIME_COLUMN = {spec.time_column!r}\n"
                             f"HORIZON = {max(1, spec.horizon)}  # steps forecast per series")
        if spec.query_path:
            group_labels += (f"\nQUERY_PATH = {spec.query_path!r}  # the points the field is asked at\n"
                             f"OBSERVATIONS_PATH = {spec.observations_path!r}  # sparse measurements ('' if none)\n"
                             f"LAW_PATH = {spec.law_path!r}  # the equation the task states, as code")
        if spec.parameter_names:
            group_labels += (f"\nPARAMETER_NAMES = {list(spec.parameter_names)!r}\n"
                             f"LAW_PATH = {spec.law_path!r}  # the law the task states, as code\n"
                             f"REPRODUCTION_FILE = {spec.reproduction_file!r}  # the law's target for each test row")
            if not spec.law_path:
                ranges = {n: (lo, hi) for n, lo, hi in spec.parameter_ranges}
                group_labels += (f"\nPARAMETER_RANGES = {ranges!r}  # as the task gives them\n"
                                 "DEFAULT_RANGE = (1e-6, 1e4)  # a parameter the task gives no range: positive\n"
                                 f"STATED_LAW_PROBLEM = {spec.stated_law_problem!r}\n"
                                 + (f"\n\n{spec.stated_law}\n" if spec.stated_law else "STATED_LAW = None"))
        return _FRAME.substitute(
            key=self.key,
            params_json=json.dumps(resolved, sort_keys=True),
            title=self.title,
            summary=dedent(self.summary).strip(),
            train_path=spec.train_path,
            test_path=spec.test_path,
            predictions_file=spec.predictions_file,
            validation_text=(f"the stated equation's residual on its own answer" if spec.query_path
                             else f"each series' last {max(1, spec.horizon)} step(s)" if spec.series_column
                             else f"how well the fitted law reproduces a {pct}% hold-out of the training rows"
                             if spec.parameter_names
                             else f"the {pct}% of training rows on the side the test set extrapolates to" if tail
                             else f"whole {spec.group_column} groups held out ({pct}% of them)" if grouped
                             else f"a random {pct}% hold-out of the training rows"),
            val_fraction=repr(VALIDATION_FRACTION),
            seed=int(seed),
            imports="\n".join(imports),
            train_path_repr=repr(spec.train_path),
            test_path_repr=repr(spec.test_path),
            target_repr=repr(spec.target),
            features_repr=repr(list(spec.features)),
            id_column_repr=repr(spec.id_column),
            group_labels=group_labels,
            predictions_file_repr=repr(spec.predictions_file),
            y_dtype="" if classify else "dtype=float",
            body=body + "\n",
            split=split.strip("\n") + "\n",
            scores=(_CLASSIFICATION_SCORES if classify else _REGRESSION_SCORES).strip("\n") + "\n",
            bounds=_bounds_fn(spec).strip("\n") + "\n",
            contract=_CONTRACT_FN.format(target_type=spec.target_type,
                                         expression=_CONTRACT.get(spec.target_type, _CONTRACT["float"])
                                         ).strip("\n") + "\n",
            main=main or _FIT_THEN_REFIT.lstrip("\n"),
        )


def _bounds_fn(spec: DataSpec) -> str:
    low, high = spec.bounds
    if spec.kind == "classification":
        return _NO_BOUNDS_FN.format(why="labels: nothing to clip")
    if low is None and high is None:
        return _NO_BOUNDS_FN.format(why="the task declares no bounds on the target")
    return _BOUNDS_FN.format(low=None if low is None else float(low), high=None if high is None else float(high))


def make_strategy(key: str, title: str, families: tuple[str, ...], tags: str, grid: dict,
                  summary: str, imports: tuple[str, ...], *body: str | Variant,
                  requires: tuple[str, ...] = (), main: str = "") -> Strategy:
    tag_set = frozenset(tags.split())
    assert tag_set <= TAG_VOCABULARY, tag_set - TAG_VOCABULARY
    return Strategy(key=key, title=title, families=frozenset(families), tags=tag_set, param_grid=grid,
                    summary=summary, imports=imports, body=tuple(body), requires=requires, main=main)


_BOTH = (ONE_D, TABULAR)
SCALER_IMPORT = "from sklearn.preprocessing import StandardScaler"
PIPE_IMPORT = "from sklearn.pipeline import make_pipeline"
POLY_IMPORT = "from numpy.polynomial import Polynomial"
_SPLINE = "from scipy.interpolate import make_smoothing_spline"

_CORE: tuple[Strategy, ...] = (
    make_strategy(
        "mean_baseline", "Constant baseline", _BOTH, "baseline fast interpretable",
        {"statistic": ("mean", "median")},
        """
        Predicts one constant (the training mean or median) for every row. It is the
        floor any real model must beat: R^2 is about 0 and nothing is learned.
        """,
        ("from sklearn.dummy import DummyRegressor",),
        """
        STATISTIC = $statistic


        def make_model():
            return DummyRegressor(strategy=STATISTIC)
        """, SKLEARN_FIT,
    ),
    make_strategy(
        "global_poly", "Global polynomial least squares", (ONE_D,),
        "baseline smooth linear interpretable fast",
        {"degree": (9, 5, 15, 25)},
        """
        One polynomial over the whole input range, fitted by least squares. Cheap and
        interpretable, but a single smooth function cannot follow a jump: it overshoots
        and rings on both sides of it (Gibbs-like), and high degrees oscillate at the ends.
        """,
        (POLY_IMPORT,),
        """
        DEGREE = $degree


        def fit_predict(X_train, y_train, X_new):
            # Polynomial.fit maps x onto [-1, 1] internally, which keeps high degrees
            # numerically well conditioned.
            poly = Polynomial.fit(X_train[:, 0], y_train, deg=min(DEGREE, len(y_train) - 1))
            return poly(X_new[:, 0])
        """,
    ),
    make_strategy(
        "smoothing_spline", "Cubic smoothing spline", (ONE_D,),
        "smooth nonparametric interpretable fast",
        {"lam": (None, 1e-6, 1e-4, 1e-2)},
        """
        A penalised cubic smoothing spline (scipy.interpolate.make_smoothing_spline). With
        lam=None the roughness penalty is chosen by generalised cross-validation. Excellent
        on smooth parts; across a jump it can only bend steeply, so it smears the jump
        and wiggles next to it.
        """,
        (_SPLINE,),
        """
        LAM = $lam  # None: choose the penalty by generalised cross-validation
        """, _UNIQUE_SORTED, """

        def fit_predict(X_train, y_train, X_new):
            xs, ys = unique_sorted(X_train[:, 0], y_train)
            spline = make_smoothing_spline(xs, ys, lam=LAM)
            return spline(X_new[:, 0])
        """,
    ),
    make_strategy(
        "piecewise_poly", "Discontinuity-aware piecewise fit", (ONE_D,),
        "discontinuity piecewise smooth interpretable fast",
        {"side_model": ("spline", "poly"), "degree": (10, 6, 14),
         "search_degree": (3, 1, 5), "min_side": (10, 5), "gap_rule": ("blend", "step")},
        """
        Locates the jump from the data, then fits each side separately. The jump is the
        split between neighbouring sorted samples that minimises the summed squared error
        of two low-degree polynomial fits (search_degree), one per side. Each side is then
        fitted on its own with a GCV smoothing spline (side_model="spline") or a polynomial
        of the given degree (side_model="poly"), so neither fit has to bridge the jump.
        Where inside the gap between the two samples that straddle the jump it really
        sits is unknown: gap_rule="blend" hands over linearly from the left fit to the right
        one across the gap (the least expected squared error if every position is equally
        likely); gap_rule="step" jumps at the midpoint of the gap.
        """,
        (POLY_IMPORT,),
        """
        SEARCH_DEGREE = $search_degree  # cheap per-side fit used while scanning for the jump
        MIN_SIDE = $min_side  # fewest samples allowed on either side of the jump
        GAP_RULE = $gap_rule
        """,
        Variant("side_model", {
            "spline": ((_SPLINE,), _UNIQUE_SORTED + """

            def fit_side(x, y):
                # A GCV smoothing spline needs at least 5 distinct x values.
                if len(np.unique(x)) >= 5:
                    return make_smoothing_spline(*unique_sorted(x, y))
                return Polynomial.fit(x, y, deg=min(3, len(x) - 1))
            """.replace("\n            ", "\n")),
            "poly": ((), """
            DEGREE = $degree  # polynomial degree of each side's fit


            def fit_side(x, y):
                return Polynomial.fit(x, y, deg=min(DEGREE, len(x) - 1))
            """),
        }),
        """
        def poly_sse(x, y, degree):
            poly = Polynomial.fit(x, y, deg=min(degree, len(x) - 1))
            return float(np.sum((poly(x) - y) ** 2))


        def locate_jump(x, y):
            \"\"\"The two neighbouring samples that straddle the jump, and the two-sided fit error.\"\"\"
            order = np.argsort(x)
            xs, ys = x[order], y[order]
            best = (np.inf, xs[0], xs[-1])
            for i in range(MIN_SIDE, len(xs) - MIN_SIDE + 1):
                if xs[i] == xs[i - 1]:
                    continue  # no split possible between equal x values
                sse = poly_sse(xs[:i], ys[:i], SEARCH_DEGREE) + poly_sse(xs[i:], ys[i:], SEARCH_DEGREE)
                if sse < best[0]:
                    best = (sse, xs[i - 1], xs[i])
            sse, lo, hi = best
            return lo, hi, sse


        def fit_predict(X_train, y_train, X_new):
            x, x_new = X_train[:, 0], X_new[:, 0]
            lo, hi, sse = locate_jump(x, y_train)
            left = fit_side(x[x <= lo], y_train[x <= lo])
            right = fit_side(x[x >= hi], y_train[x >= hi])
            mid = 0.5 * (lo + hi)
            print(f"jump_location: {mid:.5f} (between {lo:.5f} and {hi:.5f})  "
                  f"jump_size: {float(right(mid) - left(mid)):.4f}  search_sse: {sse:.4g}")
            if GAP_RULE == "blend":
                weight = np.clip((x_new - lo) / (hi - lo), 0.0, 1.0)
            else:
                weight = (x_new > mid).astype(float)
            return (1.0 - weight) * left(x_new) + weight * right(x_new)
        """,
    ),
    make_strategy(
        "knn", "k-nearest neighbours (scaled features)", _BOTH,
        "nonparametric scaling fast",
        {"n_neighbors": (5, 3, 10, 20), "weights": ("distance", "uniform")},
        """
        Averages the targets of the k nearest training rows after standardising every
        feature, so that no feature dominates the distance just because of its units.
        Local, so it follows a jump, but it is noisy and flattens oscillations.
        """,
        ("from sklearn.neighbors import KNeighborsRegressor", PIPE_IMPORT, SCALER_IMPORT),
        """
        N_NEIGHBORS = $n_neighbors
        WEIGHTS = $weights


        def make_model():
            return make_pipeline(StandardScaler(), KNeighborsRegressor(n_neighbors=N_NEIGHBORS, weights=WEIGHTS))
        """, SKLEARN_FIT,
    ),
    make_strategy(
        "knn_unscaled", "k-nearest neighbours (raw features)", (TABULAR,),
        "nonparametric baseline fast",
        {"n_neighbors": (5, 3, 10, 20), "weights": ("distance", "uniform")},
        """
        k-nearest neighbours on the raw feature values. Features measured in large units
        (cholesterol in the hundreds) dominate the Euclidean distance and small-range
        features (sex coded 1/2) are effectively ignored, so this is usually worse than the
        scaled variant: a useful lesson about preprocessing.
        """,
        ("from sklearn.neighbors import KNeighborsRegressor",),
        """
        N_NEIGHBORS = $n_neighbors
        WEIGHTS = $weights


        def make_model():
            return KNeighborsRegressor(n_neighbors=N_NEIGHBORS, weights=WEIGHTS)
        """, SKLEARN_FIT,
    ),
    make_strategy(
        "random_forest", "Random forest", _BOTH, "trees ensemble nonparametric",
        {"n_estimators": (200, 500), "max_depth": (None, 6, 10),
         "min_samples_leaf": (1, 3, 5), "max_features": (1.0, 0.5, "sqrt")},
        """
        Bagged regression trees with random feature subsets. Axis-aligned splits represent
        jumps and interactions naturally and need no scaling; the price is piecewise-constant
        (staircase) predictions on smooth parts.
        """,
        ("from sklearn.ensemble import RandomForestRegressor",),
        """
        N_ESTIMATORS = $n_estimators
        MAX_DEPTH = $max_depth
        MIN_SAMPLES_LEAF = $min_samples_leaf
        MAX_FEATURES = $max_features


        def make_model():
            return RandomForestRegressor(
                n_estimators=N_ESTIMATORS, max_depth=MAX_DEPTH, min_samples_leaf=MIN_SAMPLES_LEAF,
                max_features=MAX_FEATURES, random_state=SEED, n_jobs=1)
        """, SKLEARN_FIT,
    ),
    make_strategy(
        "extra_trees", "Extremely randomised trees", _BOTH, "trees ensemble nonparametric",
        {"n_estimators": (200, 500), "max_depth": (None, 8),
         "min_samples_leaf": (1, 3, 5), "max_features": (1.0, 0.5)},
        """
        Like a random forest but split thresholds are drawn at random, which averages into
        smoother predictions between samples and lowers variance on small data sets.
        """,
        ("from sklearn.ensemble import ExtraTreesRegressor",),
        """
        N_ESTIMATORS = $n_estimators
        MAX_DEPTH = $max_depth
        MIN_SAMPLES_LEAF = $min_samples_leaf
        MAX_FEATURES = $max_features


        def make_model():
            return ExtraTreesRegressor(
                n_estimators=N_ESTIMATORS, max_depth=MAX_DEPTH, min_samples_leaf=MIN_SAMPLES_LEAF,
                max_features=MAX_FEATURES, random_state=SEED, n_jobs=1)
        """, SKLEARN_FIT,
    ),
    make_strategy(
        "gradient_boosting", "Gradient-boosted trees", _BOTH, "trees ensemble",
        {"n_estimators": (100, 300, 600), "learning_rate": (0.1, 0.05, 0.02),
         "max_depth": (3, 2, 4), "subsample": (1.0, 0.8)},
        """
        Shallow regression trees added one at a time, each fitted to the residuals of the
        ensemble so far (scikit-learn GradientBoostingRegressor). Strong on tabular data;
        the learning rate and number of trees trade bias against overfitting.
        """,
        ("from sklearn.ensemble import GradientBoostingRegressor",),
        """
        N_ESTIMATORS = $n_estimators
        LEARNING_RATE = $learning_rate
        MAX_DEPTH = $max_depth
        SUBSAMPLE = $subsample


        def make_model():
            return GradientBoostingRegressor(
                n_estimators=N_ESTIMATORS, learning_rate=LEARNING_RATE, max_depth=MAX_DEPTH,
                subsample=SUBSAMPLE, random_state=SEED)
        """, SKLEARN_FIT,
    ),
    make_strategy(
        "hist_gradient_boosting", "Histogram gradient boosting", (TABULAR,),
        "trees ensemble fast",
        {"max_iter": (100, 200, 400), "learning_rate": (0.1, 0.05),
         "max_leaf_nodes": (15, 31, 7), "l2_regularization": (0.0, 1.0)},
        """
        Gradient boosting on binned features (scikit-learn HistGradientBoostingRegressor):
        fast, handles feature scales by construction, with leaf-count and L2 controls
        against overfitting small data.
        """,
        ("from sklearn.ensemble import HistGradientBoostingRegressor",),
        """
        MAX_ITER = $max_iter
        LEARNING_RATE = $learning_rate
        MAX_LEAF_NODES = $max_leaf_nodes
        L2_REGULARIZATION = $l2_regularization


        def make_model():
            return HistGradientBoostingRegressor(
                max_iter=MAX_ITER, learning_rate=LEARNING_RATE, max_leaf_nodes=MAX_LEAF_NODES,
                l2_regularization=L2_REGULARIZATION, random_state=SEED)
        """, SKLEARN_FIT,
    ),
    make_strategy(
        "svr", "Support vector regression (RBF kernel)", _BOTH,
        "kernel scaling regularised smooth",
        {"C": (10.0, 1.0, 100.0), "epsilon": (0.05, 0.1, 0.01), "gamma": ("scale", 10.0, 0.1)},
        """
        Epsilon-insensitive regression with a Gaussian (RBF) kernel. Features and target are
        standardised first: the kernel width and C only mean something on a common scale.
        Smooth by construction, so it blurs jumps.
        """,
        ("from sklearn.compose import TransformedTargetRegressor", PIPE_IMPORT, SCALER_IMPORT,
         "from sklearn.svm import SVR"),
        """
        C = $C
        EPSILON = $epsilon
        GAMMA = $gamma


        def make_model():
            svr = make_pipeline(StandardScaler(), SVR(C=C, epsilon=EPSILON, gamma=GAMMA))
            return TransformedTargetRegressor(regressor=svr, transformer=StandardScaler())
        """, SKLEARN_FIT,
    ),
    make_strategy(
        "mlp", "Multilayer perceptron", _BOTH, "neural smooth scaling",
        {"hidden_layer_sizes": ((64, 64), (32,), (64, 64, 64)),
         "activation": ("tanh", "relu"), "solver": ("lbfgs", "adam"),
         "learning_rate_init": (0.001, 0.01), "alpha": (0.01, 0.0001, 1.0),
         "max_iter": (500, 2000)},
        """
        A fully connected network (scikit-learn MLPRegressor) on standardised inputs and
        target. lbfgs converges well on small data; adam uses learning_rate_init. tanh gives
        smooth fits (it struggles with a jump), relu gives piecewise-linear ones; alpha is
        the L2 penalty that keeps small data sets from being memorised.
        """,
        ("from sklearn.compose import TransformedTargetRegressor",
         "from sklearn.neural_network import MLPRegressor", PIPE_IMPORT, SCALER_IMPORT) + _QUIET_IMPORTS,
        """
        HIDDEN_LAYER_SIZES = $hidden_layer_sizes
        ACTIVATION = $activation
        SOLVER = $solver
        LEARNING_RATE_INIT = $learning_rate_init
        ALPHA = $alpha
        MAX_ITER = $max_iter


        def make_model():
            net = MLPRegressor(
                hidden_layer_sizes=tuple(HIDDEN_LAYER_SIZES), activation=ACTIVATION, solver=SOLVER,
                learning_rate_init=LEARNING_RATE_INIT, alpha=ALPHA, max_iter=MAX_ITER,
                random_state=SEED)
            return TransformedTargetRegressor(regressor=make_pipeline(StandardScaler(), net),
                                              transformer=StandardScaler())
        """, SKLEARN_FIT_QUIET,
    ),
    make_strategy(
        "ridge", "Ridge regression (scaled features)", (TABULAR,),
        "linear regularised scaling interpretable fast baseline parametric extrapolation",
        {"alpha": (1.0, 0.1, 10.0, 100.0)},
        """
        Linear least squares with an L2 penalty on standardised features. A strong,
        interpretable baseline for small noisy data; scaling makes the penalty treat all
        coefficients alike.
        """,
        ("from sklearn.linear_model import Ridge", PIPE_IMPORT, SCALER_IMPORT),
        """
        ALPHA = $alpha


        def make_model():
            return make_pipeline(StandardScaler(), Ridge(alpha=ALPHA))
        """, SKLEARN_FIT,
    ),
    make_strategy(
        "lasso", "Lasso regression (scaled features)", (TABULAR,),
        "linear regularised scaling interpretable fast parametric extrapolation",
        {"alpha": (0.5, 0.1, 2.0, 5.0)},
        """
        Linear least squares with an L1 penalty on standardised features: drives the
        coefficients of redundant, correlated features exactly to zero.
        """,
        ("from sklearn.linear_model import Lasso", PIPE_IMPORT, SCALER_IMPORT) + _QUIET_IMPORTS,
        """
        ALPHA = $alpha


        def make_model():
            return make_pipeline(StandardScaler(), Lasso(alpha=ALPHA, max_iter=50000))
        """, SKLEARN_FIT_QUIET,
    ),
    make_strategy(
        "poly_ridge", "Polynomial features + ridge", (TABULAR,),
        "linear regularised scaling",
        {"degree": (2, 3), "alpha": (10.0, 1.0, 100.0)},
        """
        Adds all pairwise (or cubic) products of the standardised features and fits a ridge
        model on them: captures interactions, with the penalty doing the model selection.
        """,
        ("from sklearn.linear_model import Ridge", PIPE_IMPORT,
         "from sklearn.preprocessing import PolynomialFeatures", SCALER_IMPORT),
        """
        DEGREE = $degree
        ALPHA = $alpha


        def make_model():
            return make_pipeline(StandardScaler(), PolynomialFeatures(degree=DEGREE, include_bias=False),
                                 StandardScaler(), Ridge(alpha=ALPHA))
        """, SKLEARN_FIT,
    ),
    make_strategy(
        "stacking_ensemble", "Stacked / averaged ensemble", (TABULAR,),
        "ensemble linear trees scaling",
        {"combiner": ("average", "stack"), "forest_leaf": (3, 1, 5)},
        """
        Combines three different learners (scaled ridge, a random forest and scaled
        k-nearest neighbours), whose errors are only partly correlated. "stack" learns the
        combination weights with a ridge model on 5-fold out-of-fold predictions; "average"
        takes the plain mean.
        """,
        ("from sklearn.ensemble import RandomForestRegressor",
         "from sklearn.linear_model import Ridge",
         "from sklearn.neighbors import KNeighborsRegressor", PIPE_IMPORT, SCALER_IMPORT),
        """
        FOREST_LEAF = $forest_leaf  # min_samples_leaf of the forest member


        def ensemble_members():
            return [
                ("ridge", make_pipeline(StandardScaler(), Ridge(alpha=1.0))),
                ("forest", RandomForestRegressor(n_estimators=150, min_samples_leaf=FOREST_LEAF,
                                                 random_state=SEED, n_jobs=1)),
                ("knn", make_pipeline(StandardScaler(), KNeighborsRegressor(n_neighbors=15))),
            ]
        """,
        Variant("combiner", {
            "stack": (("from sklearn.ensemble import StackingRegressor",
                       "from sklearn.linear_model import RidgeCV",
                       "from sklearn.model_selection import KFold"), """
            def make_model():
                folds = KFold(n_splits=5, shuffle=True, random_state=SEED)
                return StackingRegressor(ensemble_members(), cv=folds, n_jobs=1,
                                         final_estimator=RidgeCV(alphas=np.logspace(-3, 3, 13)))
            """),
            "average": (("from sklearn.ensemble import VotingRegressor",), """
            def make_model():
                return VotingRegressor(ensemble_members(), n_jobs=1)
            """),
        }),
        SKLEARN_FIT,
    ),
)

# The parametric and classification strategies build on the helpers above, so they are imported
# here, once those exist (engine/offline/__init__.py always imports this module first).
from .classifiers import CLASSIFIERS  # noqa: E402
from .forecasting import FORECASTING  # noqa: E402
from .law_fit import LAW_FITS  # noqa: E402
from .pde import PDE_SOLVERS  # noqa: E402
from .neural import NEURAL  # noqa: E402
from .parametric import PARAMETRIC  # noqa: E402
from .symbolic import SYMBOLIC  # noqa: E402

STRATEGIES: tuple[Strategy, ...] = _CORE + PARAMETRIC + SYMBOLIC + NEURAL + CLASSIFIERS + FORECASTING + LAW_FITS + PDE_SOLVERS
_BY_KEY = {s.key: s for s in STRATEGIES}
assert len(_BY_KEY) == len(STRATEGIES), "duplicate strategy keys"


def strategies_for(family: str) -> list[Strategy]:
    """Strategies that apply to ``family``, in library order."""
    if family not in FAMILIES:
        raise ValueError(f"unknown problem family {family!r}; expected one of {FAMILIES}")
    return [s for s in STRATEGIES if family in s.families]


def get_strategy(key: str) -> Strategy:
    return _BY_KEY[key]


def parse_strategy_header(code: str) -> tuple[str, dict] | None:
    """(key, params) from a rendered program's first line (``# strategy: ...``), or None."""
    first = code.split("\n", 1)[0]
    return extract_strategy(first) if first.startswith("#") else None


# --------------------------------------------------------------------------------------
# First-draft mistakes and their repair
# --------------------------------------------------------------------------------------
_IMPORT_LINE = re.compile(r"^(?:import (\w+)(?: as (\w+))?|from [\w.]+ import (\w+)(?: as (\w+))?)\s*$")


def _import_binding(line: str) -> str | None:
    """The name a single-name top-level import line binds, or None for other lines."""
    match = _IMPORT_LINE.match(line)
    if not match or line.startswith("from __future__"):
        return None
    plain, plain_alias, member, member_alias = match.groups()
    return plain_alias or plain or member_alias or member


def _uses_name(code: str, name: str) -> bool:
    return re.search(rf"(?<![\w.]){re.escape(name)}\b", code) is not None


def _module_constants(code: str) -> dict[str, object]:
    """Module-level ``NAME = <str or list of str>`` assignments: the program's column names."""
    try:
        tree = python_ast.parse(code)
    except SyntaxError:
        return {}
    constants: dict[str, object] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                value = ast.literal_eval(node.value)
            except (ValueError, SyntaxError, TypeError):
                continue
            if isinstance(value, str) or (isinstance(value, (list, tuple))
                                          and all(isinstance(v, str) for v in value)):
                constants[node.targets[0].id] = value
    return constants


def _inject_missing_import(code: str, rng: random.Random) -> str | None:
    lines = code.split("\n")
    # Only imports whose name the program really uses, so the mistake surfaces when run.
    candidates = [i for i, line in enumerate(lines)
                  if (name := _import_binding(line))
                  and _uses_name("\n".join(lines[:i] + lines[i + 1:]), name)]
    if not candidates:
        return None
    del lines[rng.choice(candidates)]
    return "\n".join(lines)


def _misspell(name: str, rng: random.Random) -> str:
    variants = {name.upper(), name.capitalize(), name + "s"}
    if len(name) > 3:
        for i in range(1, len(name)):
            variants.add(name[:i] + name[i + 1:])                          # dropped letter
            variants.add(name[:i - 1] + name[i] + name[i - 1] + name[i + 1:])  # swapped letters
    variants.discard(name)
    return rng.choice(sorted(variants))


_COLUMN_USE = re.compile(r"\b(train|test)\[(TARGET|ID_COLUMN)\]")


def _inject_misspelled_column(code: str, rng: random.Random) -> str | None:
    constants = _module_constants(code)
    sites = [m for m in _COLUMN_USE.finditer(code) if isinstance(constants.get(m.group(2)), str)]
    if not sites:
        return None
    site = rng.choice(sites)
    wrong = _misspell(constants[site.group(2)], rng)
    return code[:site.start()] + f"{site.group(1)}[{json.dumps(wrong)}]" + code[site.end():]


_FRAME_WITH_ID = re.compile(r"pd\.DataFrame\(\{\s*ID_COLUMN:\s*\w+,\s*")


def _inject_missing_id_column(code: str, rng: random.Random) -> str | None:
    match = _FRAME_WITH_ID.search(code)
    if not match:
        return None
    return code[:match.start()] + "pd.DataFrame({" + code[match.end():]


_FEATURE_MATRIX = re.compile(r"^(\s*X = .*\.to_numpy\(dtype=float\))$", re.M)


def _inject_shape_error(code: str, rng: random.Random) -> str | None:
    match = _FEATURE_MATRIX.search(code)
    if not match:
        return None
    flatten = rng.choice([".ravel()", ".flatten()", ".reshape(-1)"])
    return code[:match.end()] + flatten + code[match.end():]


_INJECTORS = {
    "missing_import": _inject_missing_import,
    "misspelled_column": _inject_misspelled_column,
    "missing_id_column": _inject_missing_id_column,
    "shape_error": _inject_shape_error,
}


def inject_bug(code: str, rng: random.Random, kind: str | None = None) -> tuple[str, str]:
    """Introduce one realistic first-draft mistake; returns (buggy_code, bug_kind).

    ``kind`` forces one of BUG_KINDS; otherwise ``rng`` picks among those that apply.
    Returns (code, "none") when no mistake can be introduced into ``code``.
    """
    if kind is not None and kind not in _INJECTORS:
        raise ValueError(f"unknown bug kind {kind!r}; expected one of {BUG_KINDS}")
    kinds = [kind] if kind else list(BUG_KINDS)
    rng.shuffle(kinds)
    for candidate in kinds:
        buggy = _INJECTORS[candidate](code, rng)
        if buggy is not None and buggy != code:
            return buggy, candidate
    return code, "none"


@dataclass(frozen=True)
class _Failure:
    exc_type: str   # unqualified exception class name
    message: str    # everything after "ExcType: ", possibly several lines
    lineno: int | None  # line in the program (deepest frame outside libraries)


_FRAME_LINE = re.compile(r'^\s*File "([^"]+)", line (\d+)')
_EXC_LINE = re.compile(r"^([A-Za-z_][\w.]*)(?::\s?(.*))?$")
_LIBRARY_PATH = re.compile(r"site-packages|dist-packages|/lib/python\d|^<")


def _parse_traceback(stderr: str) -> _Failure | None:
    """Exception type, message and program line of the last traceback in ``stderr``."""
    marker = "Traceback (most recent call last):"
    if marker not in stderr:
        return None
    block = stderr.rsplit(marker, 1)[1].split("\n")
    lineno = None
    for i, line in enumerate(block):
        frame = _FRAME_LINE.match(line)
        if frame and not _LIBRARY_PATH.search(frame.group(1)):
            lineno = int(frame.group(2))
        if line and not line[0].isspace():
            exc = _EXC_LINE.match(line)
            if not exc:
                return None
            message = "\n".join([exc.group(2) or ""] + block[i + 1:]).strip()
            return _Failure(exc.group(1).rsplit(".", 1)[-1], message, lineno)
    return None


def _known_imports() -> dict[str, str]:
    """Bound name -> import line for everything the library's programs import."""
    known = {"os": "import os", "time": "import time", "json": "import json",
             "math": "import math", "warnings": "import warnings",
             "np": "import numpy as np", "pd": "import pandas as pd"}
    for strategy in STRATEGIES:
        for line in strategy.all_imports():
            name = _import_binding(line)
            if name:
                known.setdefault(name, line)
    return known


def _fix_missing_import(code: str, failure: _Failure) -> str | None:
    match = re.search(r"name '(\w+)' is not defined", failure.message)
    line = _known_imports().get(match.group(1)) if match else None
    if line is None or line in code.split("\n"):
        return None  # unknown name, or already imported: not a missing-import mistake
    name = match.group(1)
    lines = code.split("\n")
    imports = [i for i, text in enumerate(lines) if _import_binding(text)]
    insert_at = imports[-1] + 1 if imports else 0
    # A name used at module level (os in the thread-limit loop) must be imported before it.
    try:
        for node in python_ast.parse(code).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)):
                continue
            if any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(node)):
                insert_at = min(insert_at, node.lineno - 1)
                break
    except SyntaxError:
        pass
    lines.insert(insert_at, line)
    return "\n".join(lines)


def _missing_keys(message: str) -> list[str]:
    """Column names from a pandas KeyError message ('y', "['id'] not in index", ...)."""
    first = message.split("\n", 1)[0].strip()
    try:
        value = ast.literal_eval(first)
    except (ValueError, SyntaxError):
        value = first
    text = str(value)
    quoted = re.findall(r"'([^']*)'", text)
    if quoted and ("not in index" in text or "None of" in text):
        return quoted
    return [text]


def _closest(name: str, candidates: list[str]) -> str | None:
    for candidate in candidates:
        if candidate.lower() == name.lower():
            return candidate
    close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
    return close[0] if close else None


def _fix_key_error(code: str, failure: _Failure) -> str | None:
    keys = _missing_keys(failure.message)
    lines = code.split("\n")
    if failure.lineno is None or not 1 <= failure.lineno <= len(lines):
        return None
    failing = lines[failure.lineno - 1]
    constants = _module_constants(code)
    # Which constant holds each declared column name, for restoring the symbolic reference.
    owner = {v: k for k, v in constants.items() if isinstance(v, str)}
    columns = sorted({v for v in constants.values() if isinstance(v, str)}
                     | {c for v in constants.values() if isinstance(v, (list, tuple)) for c in v})
    columns = [c for c in columns if "/" not in c and "." not in c]  # not file paths

    # Misspelled column: the failing line spells a name that is not a declared column.
    for key in keys:
        literal = re.compile(r"""(["'])%s\1""" % re.escape(key))
        if key not in columns and literal.search(failing):
            right = _closest(key, [c for c in columns if c != key])
            if right is None:
                return None
            replacement = owner.get(right, repr(right))
            lines[failure.lineno - 1] = literal.sub(lambda _: replacement, failing)
            return "\n".join(lines)

    # Missing id column: the predictions frame was built without the id column.
    id_const = next((owner[k] for k in keys if k in owner), None)
    if id_const is None or len(keys) != 1:
        return None
    id_var = re.search(rf"^\s*(\w+)\s*=\s*\w+\[{id_const}\]", code, re.M)
    frame = re.search(r"pd\.DataFrame\(\{([^{}]*)\}", code)
    # Only a frame that lacks the column is this mistake; a column missing from the data is not.
    if not id_var or not frame or re.search(rf"(?<!\w){id_const}\s*:", frame.group(1)):
        return None
    return code[:frame.start(1)] + f"{id_const}: {id_var.group(1)}, " + code[frame.start(1):]


_ONE_D_SYMPTOMS = ("Expected 2D array", "Expected a 2-dimensional", "array is 1-dimensional",
                   "tuple index out of range")
_FLATTENED = re.compile(r"^(\s*(\w+)\s*=.*?)\.(?:ravel\(\)|flatten\(\)|reshape\(-1\))\s*$", re.M)


def _fix_shape_error(code: str, failure: _Failure) -> str | None:
    if not any(symptom in failure.message for symptom in _ONE_D_SYMPTOMS):
        return None
    lines = code.split("\n")
    failing = lines[failure.lineno - 1] if failure.lineno and failure.lineno <= len(lines) else ""
    if failure.exc_type == "IndexError" and "tuple index" in failure.message and ".shape[" not in failing:
        return None  # an unrelated tuple index error
    flattened = list(_FLATTENED.finditer(code))
    # Prefer the array named on the failing line; otherwise any flattened feature matrix.
    suspects = ([m for m in flattened if re.search(rf"\b{m.group(2)}\b", failing)]
                or [m for m in flattened if m.group(2).startswith("X")])
    if not suspects:
        return None
    match = suspects[0]
    return code[:match.start()] + match.group(1) + code[match.end():]


_FIXERS = {
    "NameError": _fix_missing_import,
    "KeyError": _fix_key_error,
    "ValueError": _fix_shape_error,
    "IndexError": _fix_shape_error,
}


def fix_bug(code: str, stderr: str) -> str | None:
    """Repair ``code`` from its traceback alone; None when the error is not understood."""
    failure = _parse_traceback(stderr)
    if failure is None or failure.exc_type not in _FIXERS:
        return None
    fixed = _FIXERS[failure.exc_type](code, failure)
    return fixed if fixed is not None and fixed != code else None
