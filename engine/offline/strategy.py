"""A modelling strategy of the offline scientist: a complete program rendered from a template
around one field library's estimator (scikit-learn, statsmodels, scipy, PySINDy, torch, ...),
with the hyperparameters a search varies, and the facts of a task's data it is chosen for
(``DataSpec``, ``family_of``). The strategies themselves are in strategies.py (the core ones
and the registry) and in one module per field (parametric.py, symbolic.py, classifiers.py,
forecasting.py, law_fit.py, pde.py, neural.py).

Pure Python, no Django and no third-party imports: the *rendered* programs use numpy, scipy,
pandas and scikit-learn (and, where a strategy declares it in ``requires``, another package),
but this module only writes their source.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from string import Template
from textwrap import dedent
from typing import TYPE_CHECKING

from ..task_kind import task_kind
from .reading import AnswerFacts, read_facts

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
class DataSpec(AnswerFacts):
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


def spec_of_task(task: "Task") -> DataSpec:
    """The DataSpec a task folder declares (``engine.task.Task``): what the benchmarks and tests
    render programs for without going through a prompt, as the planner reads it from one."""
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

QUIET_IMPORTS = ("import warnings", "from sklearn.exceptions import ConvergenceWarning")

# Smoothing splines need strictly increasing x; shared by two 1-D strategies.
UNIQUE_SORTED = '''
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


SCALER_IMPORT = "from sklearn.preprocessing import StandardScaler"
PIPE_IMPORT = "from sklearn.pipeline import make_pipeline"
POLY_IMPORT = "from numpy.polynomial import Polynomial"
