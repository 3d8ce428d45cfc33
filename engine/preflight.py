"""Preflight: check a task's data against its Data_config.json before any model is called.

load_task (engine/task.py) checks the task folder's *files*; preflight reads the data once and
checks its *contents*: file roles, the target and id columns, the feature columns of train and
test, NaNs, types, row counts, the label type and its classes, the predictions contract, and
that evaluate.py prints the metric Evaluation.md names. Every problem is collected, so one
edit can fix them all, and each sentence names the file and the column.

Its TaskFacts (kind, classes, ranges) are what later stages need to know about the data
(in-loop validation, plausibility checks); warnings are problems that do not stop a run.

Every problem is reported in well under a second (benchmarks/preflight.py): the data checks
need no pandas, evaluate.py starts in the background before them and is stopped unread once the
data has failed, and the metric name evaluate.py prints is read from its source (an AST scan)
so that a mismatch needs no run; a run that finishes in time is the authority, and a source the
scan cannot read for certain is left to the run.
"""
from __future__ import annotations

import ast
import csv
import hashlib
import json
import math
import os
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from . import python_ast
from .errors import TaskSpecError
from .evaluator_sandbox import INPUT_DIR, EvaluatorRun, run_evaluate_py
from .task import Task
from .task_kind import CLASSIFICATION_METRICS, MAX_INFERRED_CLASSES, REGRESSION_METRICS, decide_kind  # noqa: E402
from .validation import EXTRAPOLATION_SHARE, read_data

TRUTH_ROWS = 50          # rows of the training file in the tiny truth evaluate.py scores
SHOWN = 8                # names or line numbers quoted in one message


class PreflightError(TaskSpecError):
    """Every problem preflight found, each a sentence naming its file and column."""

    def __init__(self, task_name: str, problems: list[str], warnings: list[str] | None = None,
                 timings: dict[str, float] | None = None):
        self.problems = list(problems)
        self.warnings = list(warnings or [])
        self.timings = dict(timings or {})  # as TaskFacts.timings
        listed = "\n".join([*(f"  - {p}" for p in self.problems), *(f"  - warning: {w}" for w in self.warnings)])
        super().__init__(task_name, f"the task's data fails preflight ({len(self.problems)} problem(s)); "
                         f"nothing was run and no model was called:\n{listed}")


@dataclass(frozen=True)
class FeatureRange:
    """A numeric feature's range in the training and test files, and how many test rows lie
    beyond the training range on each side (extrapolation)."""

    train_min: float
    train_max: float
    test_min: float
    test_max: float
    test_below: int = 0   # test rows below train_min
    test_above: int = 0   # test rows above train_max
    test_rows: int = 0    # test rows with a finite value


@dataclass(frozen=True)
class TaskFacts:
    kind: str                           # "regression" | "classification"
    kind_source: str                    # why: "declared in Data_config.json", "metric 'accuracy'", ...
    classes: list | None                # sorted class labels (classification), else None
    features: tuple[str, ...]
    n_train: int
    n_test: int
    target_min: float | None            # None when the labels are not numbers
    target_max: float | None
    target_mean: float | None
    feature_ranges: dict[str, FeatureRange]  # numeric features only
    non_numeric_features: tuple[str, ...] = ()
    evaluate_metric: str | None = None  # the name evaluate.py printed; None when it was not read
    evaluate_supports_truth: bool = False
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0
    # where the time went: "data" (reading and checking the files), "evaluate" (evaluate.py's
    # run, until read or stopped; 0 when its answer was remembered), "total"
    timings: dict[str, float] = field(default_factory=dict)

    def beyond_training_range(self, min_share: float = EXTRAPOLATION_SHARE) -> dict[str, str]:
        """Features on which the test set extrapolates: at least ``min_share`` of the test rows lie
        beyond the training range on a side. feature -> "upper" | "lower" | "both". A few test rows
        just outside a randomly split range (measured: at most 6 % on a random split of 178 rows)
        are sampling, not a question about extrapolation."""
        out = {}
        for name, r in self.feature_ranges.items():
            n = max(1, r.test_rows)
            above, below = r.test_above / n >= min_share, r.test_below / n >= min_share
            if above or below:
                out[name] = "both" if above and below else "upper" if above else "lower"
        return out

    def to_dict(self) -> dict:
        d = asdict(self)
        d["features"] = list(self.features)
        d["non_numeric_features"] = list(self.non_numeric_features)
        d["beyond_training_range"] = self.beyond_training_range()
        return d


def preflight(task: Task, timeout_s: float = 30.0, cache_dir: Path | None = None) -> TaskFacts:
    """Check the task's data and evaluate.py; return the facts, or raise PreflightError with
    every problem found. Reads each data file once; evaluate.py runs in its sandbox while the
    data is checked here.

    Starting Python and pandas for evaluate.py is most of the time (about 0.6 s); what it printed
    is remembered per content of the task folder (in this process, and in ``cache_dir`` when
    given), so a second preflight of an unchanged task takes milliseconds."""
    started = time.perf_counter()
    checker = _Checker(task)
    facts = checker.run(timeout_s, cache_dir)
    timings = {**checker.timings, "total": round(time.perf_counter() - started, 4)}
    if checker.problems:
        raise PreflightError(task.name, checker.problems, checker.warnings, timings)
    assert facts is not None
    return replace(facts, seconds=round(time.perf_counter() - started, 3), timings=timings)


def _names(items: list[str] | tuple[str, ...], quote: bool = True) -> str:
    shown = [f"'{x}'" if quote else str(x) for x in items[:SHOWN]]
    more = f" and {len(items) - SHOWN} more" if len(items) > SHOWN else ""
    return ", ".join(shown) + more


def _lines(rows: list[int]) -> str:
    """File line numbers of data rows (the header is line 1; a row's first line for quoted line breaks
    is not tracked, so the numbers assume one line per row)."""
    return _names([str(i + 2) for i in rows], quote=False)


def _metric_key(name: str) -> str:
    return name.strip().lower().replace("-", "_")


class _Checker:
    def __init__(self, task: Task):
        self.task = task
        self.r = task.resources
        self.problems: list[str] = []
        self.warnings: list[str] = []
        self.timings: dict[str, float] = {}

    def problem(self, text: str) -> None:
        self.problems.append(text)

    def warn(self, text: str) -> None:
        self.warnings.append(text)

    # --- the whole check ---------------------------------------------------------------------------
    def run(self, timeout_s: float, cache_dir: Path | None = None) -> TaskFacts | None:
        r = self.r
        if not r.files:
            self.problem("Data_config.json is missing or declares no 'files'; Trellis needs "
                         "\"files\": {\"train\": ..., \"test_features\": ...} (see README 'Task folders')")
            return None
        roles_ok = self._check_roles()
        for problem in self.task.assessment().stated_problems():
            self.problem(problem)
        own = self.task.assessment().check_files() if roles_ok else None
        if own is not None:  # an answer kind without a training table (a field): its own files
            return self._run_own(own, timeout_s, cache_dir)
        if not r.target:
            self.problem("Data_config.json declares no 'target': name the column of data to predict")
        if not r.id_column:
            self.problem("Data_config.json declares no 'id_column': name the column that identifies each "
                         "test row in the predictions")
        if not roles_ok:
            return None
        train_path, test_path = r.files["train"], r.files["test_features"]
        scorer = _EvaluateRun(self.task, timeout_s, cache_dir)
        scorer.start(self._tiny_truth(train_path, test_path))
        wait = False
        try:
            started = time.perf_counter()
            train = self._read(train_path)
            test = self._read(test_path)
            facts = self._check_data(train, test, train_path, test_path) if train is not None and test is not None else None
            self.timings["data"] = round(time.perf_counter() - started, 4)
            static = printed_metric(scorer.source)
            # With something already wrong, say it now: evaluate.py's answer is used if it is in
            # already, otherwise it is stopped unread (it runs again once the task is fixed).
            wait = not self.problems and not static.contradicts(self.task.metric)
        finally:
            outcome = scorer.finish(wait=wait)
            self.timings["evaluate"] = round(scorer.seconds, 4)
        metric = self._check_evaluate(outcome, static)
        if facts is None:
            return None
        return replace(facts, evaluate_metric=metric, evaluate_supports_truth=scorer.with_truth,
                       warnings=self.warnings)

    def _run_own(self, own: tuple[list[str], list[str], dict], timeout_s: float, cache_dir: Path | None) -> TaskFacts:
        problems, warnings, facts = own
        self.problems += problems
        self.warnings += warnings
        scorer = _EvaluateRun(self.task, timeout_s, cache_dir)
        scorer.start({"ids": [], "values": [], "test_ids": [], "trivial": ""})
        outcome = scorer.finish(wait=not self.problems)
        self.timings["evaluate"] = round(scorer.seconds, 4)
        metric = self._check_evaluate(outcome, printed_metric(scorer.source))
        decision = self.task.assessment().kind()
        return TaskFacts(kind=decision.kind, kind_source=decision.reason, classes=None,
                         features=tuple(facts.get("features", ())), n_train=0, n_test=int(facts.get("n_test", 0)),
                         target_min=None, target_max=None, target_mean=None, feature_ranges={},
                         evaluate_metric=metric, evaluate_supports_truth=scorer.with_truth, warnings=self.warnings)

    def _check_roles(self) -> bool:
        files = self.r.files
        required = self.task.assessment().required_roles()
        known = (*required, "train", "test_features", *self.task.assessment().roles())
        unknown = [role for role in files if role not in known]
        missing = [role for role in required if role not in files]
        for role in missing:
            what = ("the features, target (and optionally id) of the rows agents fit on" if role == "train"
                    else "the id and features of the rows agents predict, without the target"
                    if role == "test_features" else "named by Data_config.json's 'answer'")
            found = f" (it has {_names(unknown)}, which Trellis does not know)" if unknown else ""
            self.problem(f"Data_config.json: 'files' has no '{role}' role{found}; '{role}' is {what}")
        if unknown and not missing:
            self.warn(f"Data_config.json: 'files' role(s) {_names(unknown)} are copied into the sandbox but "
                      "Trellis only knows 'train' and 'test_features'")
        return not missing

    def _read(self, rel: str) -> "_Table | None":
        try:
            return _Table.read(self.task.folder / rel, rel)
        except _Unreadable as exc:
            self.problem(str(exc))
        return None

    # --- the data ----------------------------------------------------------------------------------
    def _check_data(self, train: "_Table", test: "_Table", train_path: str, test_path: str) -> TaskFacts | None:
        r = self.r
        target, id_col = r.target, r.id_column
        for t in (train, test):
            if t.duplicated_names:
                self.problem(f"{t.path}: column name(s) {_names(t.duplicated_names)} appear more than once in the header")
            if t.n_rows == 0:
                self.problem(f"{t.path}: has a header but no rows")
        if target and target not in train:
            self.problem(f"{train_path}: has no target column '{target}' (Data_config.json 'target'); "
                         f"its columns are {_names(train.names)}")
        if target and target in test:
            if len(test[target].missing) < test.n_rows:
                self.problem(f"{test_path}: has the target column '{target}' with values; agents read this file, "
                             "so it would hand them the answers (the held-out targets belong under heldout/)")
            else:
                self.warn(f"{test_path}: has an empty target column '{target}'; it is ignored")
        if id_col and id_col not in test:
            self.problem(f"{test_path}: has no id column '{id_col}' (Data_config.json 'id_column'); "
                         f"its columns are {_names(test.names)}")
        features = self._check_features(train, test, train_path, test_path)
        self._check_ids(train, test, train_path, test_path)
        self._check_declared_columns(train, test, train_path, test_path, features)

        usable = [f for f in features if f in train and f in test]
        for t in (train, test):
            for name in usable:
                col = t[name]
                if col.missing:
                    self.problem(f"{t.path}: feature column '{name}' has {len(col.missing)} missing or NaN value(s) "
                                 f"(line(s) {_lines(col.missing)})")
                if col.infinite:
                    self.problem(f"{t.path}: feature column '{name}' has {len(col.infinite)} infinite value(s) "
                                 f"(line(s) {_lines(col.infinite)})")
        ranges, non_numeric = {}, []
        for name in usable:
            a, b = train[name], test[name]
            if a.numeric and b.numeric:
                ranges[name] = _feature_range(a, b)
            elif a.present and b.present and (a.numeric or b.numeric):
                text = b if a.numeric else a
                row, value = text.first_text
                self.problem(f"{text.path}: feature column '{name}' has text where the other file has numbers "
                             f"(e.g. {value[:40]!r} at line {row + 2})")
            elif a.present:
                non_numeric.append(name)
        if non_numeric:
            self.warn(f"feature column(s) {_names(non_numeric)} are not numeric in {train_path}; "
                      "programs must encode them")

        if not target or target not in train or train.n_rows == 0:
            return None
        y = train[target]
        if y.missing:
            self.problem(f"{train_path}: target column '{target}' has {len(y.missing)} missing or NaN value(s) "
                         f"(line(s) {_lines(y.missing)})")
        if y.infinite:
            self.problem(f"{train_path}: target column '{target}' has {len(y.infinite)} infinite value(s) "
                         f"(line(s) {_lines(y.infinite)})")
        if not y.present:
            return None
        kind, source = self._kind(y)
        classes = self._check_labels(kind, y, train_path)
        if kind == "regression" and not y.numeric:
            row, value = y.first_text
            self.problem(f"{train_path}: target column '{target}' is not numeric (e.g. {value[:40]!r} at "
                         f"line {row + 2}) but the task is a regression ({source})")
        self._check_contract(kind, y)
        numbers = [v for v in y.finite_numbers()] if y.numeric else []
        if numbers:
            self._check_constraints(y, train_path)
        return TaskFacts(
            kind=kind, kind_source=source, classes=classes, features=tuple(features),
            n_train=train.n_rows, n_test=test.n_rows,
            target_min=min(numbers) if numbers else None, target_max=max(numbers) if numbers else None,
            target_mean=math.fsum(numbers) / len(numbers) if numbers else None, feature_ranges=ranges,
            non_numeric_features=tuple(non_numeric))

    def _check_features(self, train: "_Table", test: "_Table", train_path: str, test_path: str) -> list[str]:
        r = self.r
        features = list(r.features)
        where = "Data_config.json 'features'" if r.features_declared else f"the columns of {test_path}"
        if not features:
            self.problem(f"no feature columns: {where} name none besides the id and target")
            return []
        for special, key in ((r.target, "target"), (r.id_column, "id_column")):
            if special and special in features:
                self.problem(f"Data_config.json: 'features' lists '{special}', which is the {key}")
        features = [f for f in features if f not in (r.target, r.id_column)]
        not_in_train = [f for f in features if f not in train]
        not_in_test = [f for f in features if f not in test]
        if not_in_train:
            self.problem(f"{train_path}: has no column {_names(not_in_train)} ({where}); "
                         "a feature must be in both the training and the test file")
        if not_in_test:
            self.problem(f"{test_path}: has no column {_names(not_in_test)} ({where}); a program fitted on "
                         "a training-only column cannot predict the test rows")
        if not r.features_declared:
            train_only = [c for c in train.names if c not in test and c not in (r.target, r.id_column)]
            if train_only:
                self.warn(f"{train_path}: column(s) {_names(train_only)} are not in {test_path}, so they are not "
                          "features (Data_config.json omits 'features')")
        return features

    def _check_ids(self, train: "_Table", test: "_Table", train_path: str, test_path: str) -> None:
        id_col = self.r.id_column
        if not id_col or id_col not in test:
            return
        ids = test[id_col]
        if ids.missing:
            self.problem(f"{test_path}: id column '{id_col}' has {len(ids.missing)} empty value(s) "
                         f"(line(s) {_lines(ids.missing)})")
        dup_rows = ids.duplicate_rows()
        if dup_rows:
            values = sorted({ids.raw[i] for i in dup_rows})
            self.problem(f"{test_path}: id column '{id_col}' has duplicate ids {_names(values)} "
                         f"(line(s) {_lines(dup_rows)})")
        if self.r.prediction_columns.get(id_col) == "int":
            bad = next(((i, v) for i, v in enumerate(ids.raw) if i not in ids.missing_set
                        and (ids.numbers is None or ids.numbers[i] is None or not float(ids.numbers[i]).is_integer())),
                       None)
            if bad:
                self.problem(f"{test_path}: id column '{id_col}' has non-integer ids (e.g. {bad[1][:40]!r} at "
                             f"line {bad[0] + 2}) but Data_config.json 'predictions.columns' says int")
        if id_col in train and train[id_col].duplicate_rows():
            self.warn(f"{train_path}: id column '{id_col}' has duplicate ids")

    def _check_declared_columns(self, train: "_Table", test: "_Table", train_path: str, test_path: str,
                                features: list[str]) -> None:
        v, c = self.r.validation, self.r.constraints
        if v is not None and v.column:
            if v.column not in train:
                self.problem(f"{train_path}: has no column '{v.column}' (Data_config.json 'validation.column' of the "
                             f"{v.split!r} split)")
            elif v.split == "holdout_range":
                if v.column not in test:
                    self.problem(f"{test_path}: has no column '{v.column}' (Data_config.json 'validation.column'); a "
                                 "range hold-out must be on an input the test rows have")
                if not train[v.column].numeric:
                    self.problem(f"{train_path}: column '{v.column}' (Data_config.json 'validation.column') is not "
                                 "numeric; a holdout_range split needs a numeric column")
        for col in (c.monotone if c else {}):
            missing = [t.path for t in (train, test) if col not in t]
            if missing:
                self.problem(f"{' and '.join(missing)}: no column '{col}' (Data_config.json 'constraints.monotone')")
            elif col not in features:
                self.problem(f"Data_config.json: 'constraints.monotone' names '{col}', which is not a feature")
            elif not train[col].numeric:
                self.problem(f"{train_path}: column '{col}' (Data_config.json 'constraints.monotone') is not numeric")

    # --- the label ---------------------------------------------------------------------------------
    def _kind(self, y: "_Column") -> tuple[str, str]:
        """Decided where every part of Trellis decides it (engine/task_kind.py)."""
        decision = decide_kind(self.r.kind, self.task.metric.name, self.r.prediction_columns.get(self.r.target or ""),
                               [v for i, v in enumerate(y.raw) if i not in y.missing_set],
                               self.r.target or "the target")
        return decision.kind, decision.reason

    def _check_labels(self, kind: str, y: "_Column", train_path: str) -> list | None:
        metric = _metric_key(self.task.metric.name)
        if kind == "regression":
            if metric in CLASSIFICATION_METRICS:
                self.warn(f"the task is a regression but Evaluation.md's metric '{self.task.metric.name}' scores class labels")
            return None
        if metric in REGRESSION_METRICS:
            self.warn(f"the task is a classification but Evaluation.md's metric '{self.task.metric.name}' scores numbers")
        classes = y.labels()
        if len(classes) < 2:
            self.problem(f"{train_path}: target column '{self.r.target}' has a single class {classes!r}; "
                         "a classifier needs at least two")
        elif len(classes) > max(MAX_INFERRED_CLASSES, y.present // 2):
            self.warn(f"{train_path}: target column '{self.r.target}' has {len(classes)} classes for {y.present} rows; "
                      "is this really a classification?")
        return classes

    def _check_contract(self, kind: str, y: "_Column") -> None:
        cols, target, id_col = self.r.prediction_columns, self.r.target, self.r.id_column
        if not cols:
            self.warn("Data_config.json declares no 'predictions.columns'; agents get the contract csv[any] and "
                      "nothing checks the predictions' columns before evaluate.py")
            return
        required = self.task.assessment().answer_columns()
        if required is not None:  # an answer kind with columns of its own (a table of parameters)
            for name, typ in required.items():
                if cols.get(name) != typ:
                    self.problem(f"Data_config.json: 'predictions.columns' must give '{name}' as {typ} for answer kind "
                                 f"'{self.task.assessment().name}' (it has {_names(list(cols))})")
            return
        for name, key in ((id_col, "id_column"), (target, "target")):
            if name and name not in cols:
                self.problem(f"Data_config.json: 'predictions.columns' has no column for the {key} '{name}' "
                             f"(it has {_names(list(cols))})")
        typ = cols.get(target or "")
        if typ is None:
            return
        if kind == "regression":
            if typ in ("str", "bool"):
                self.problem(f"Data_config.json: 'predictions.columns.{target}' is {typ} but the task is a "
                             "regression; use float")
            elif typ == "int":
                self.warn(f"Data_config.json: 'predictions.columns.{target}' is int for a regression: "
                          "predictions must be whole numbers; float is the usual contract")
            return
        if typ in ("int", "float") and not y.numeric and not y.boolean:
            self.problem(f"Data_config.json: 'predictions.columns.{target}' is {typ} but the labels in "
                         f"'{target}' are text (e.g. {y.first_text[1][:40]!r}); use str")
        elif typ == "int" and y.numeric and not y.whole:
            self.problem(f"Data_config.json: 'predictions.columns.{target}' is int but the labels in "
                         f"'{target}' are not whole numbers")
        elif typ == "bool" and not (y.boolean or set(y.finite_numbers()) <= {0.0, 1.0}):
            self.problem(f"Data_config.json: 'predictions.columns.{target}' is bool but '{target}' has labels "
                         "other than 0/1 or true/false")

    def _check_constraints(self, y: "_Column", train_path: str) -> None:
        c = self.r.constraints
        if c is None or y.numbers is None:
            return
        for bound, key in ((c.min, "min"), (c.max, "max")):
            if bound is None:
                continue
            outside = [i for i, v in enumerate(y.numbers) if v is not None
                       and (v < bound if key == "min" else v > bound)]
            if outside:
                self.warn(f"{train_path}: {len(outside)} value(s) of the target '{self.r.target}' lie "
                          f"{'below' if key == 'min' else 'above'} Data_config.json 'constraints.{key}' = {bound:g} "
                          f"(line(s) {_lines(outside)})")

    # --- evaluate.py -------------------------------------------------------------------------------
    def _tiny_truth(self, train_path: str, test_path: str) -> dict | None:
        """A small truth file from the training rows and the trivial prediction for it (mean, or
        the most frequent label), read from the first rows only so that evaluate.py starts before
        the data checks. None when the columns it needs are missing (the data checks report it)."""
        target, id_col = self.r.target, self.r.id_column
        if not target or not id_col:
            return None
        try:
            with (self.task.folder / train_path).open(encoding="utf-8", newline="") as fh:
                reader = csv.DictReader(fh, skipinitialspace=True)
                rows = []
                for row in reader:
                    value = (row.get(target) or "").strip()
                    if value and value.lower() not in ("nan", "na", "null", "none"):
                        rows.append(((row.get(id_col) or "").strip(), value))
                    if len(rows) >= TRUTH_ROWS:
                        break
            with (self.task.folder / test_path).open(encoding="utf-8", newline="") as fh:
                test_ids = [(row.get(id_col) or "").strip() for row in csv.DictReader(fh, skipinitialspace=True)]
        except (OSError, UnicodeDecodeError, csv.Error):
            return None
        extra_rows = self._fold_truth_rows()
        if extra_rows is not None:  # the metric needs more than id and target: a real fold's truth
            rows = [(str(k), row[0]) for k, row in enumerate(extra_rows)]
        if not rows:
            return None
        ids = [i for i, _ in rows]
        if len(set(ids)) != len(ids) or "" in ids:  # no usable ids in train: number the rows
            ids = [str(k) for k in range(len(rows))]
        values = [v for _, v in rows]
        return {"ids": ids, "values": values, "test_ids": [i for i in test_ids if i],
                "trivial": self._trivial(values), "extra": self._extra_truth_columns(),
                "extra_values": [row[1:] for row in extra_rows] if extra_rows is not None else None}

    def _extra_truth_columns(self) -> list[str]:
        """Truth columns the task's answer kind gives evaluate.py beyond id and target (a series'
        name and time, for a per-series metric)."""
        try:
            columns = self.task.assessment().truth_columns()
        except (KeyError, ValueError):
            return []
        return [c for c in columns if c not in (self.r.id_column, self.r.target)]

    def _fold_truth_rows(self) -> list[list[str]] | None:
        """For an answer kind whose truth carries more than id and target: the first validation
        fold's rows (target, then the extra columns), at most TRUTH_ROWS; None for every other kind
        (the first training rows serve, read before the data checks finish)."""
        extra = self._extra_truth_columns()
        if not extra:
            return None
        try:
            assessment = self.task.assessment()
            data = read_data(self.task)
            _, val_idx = assessment.folds(assessment.plan(), data, 0)[0]
            return [[data.rows[i][self.r.target], *(data.rows[i].get(c, "") for c in extra)]
                    for i in val_idx[:TRUTH_ROWS]]
        except (OSError, KeyError, ValueError, IndexError, UnicodeDecodeError, csv.Error):
            return None

    def _trivial(self, values: list[str]) -> str:
        typ = self.r.prediction_columns.get(self.r.target or "")
        try:
            numbers = [float(v) for v in values]
        except ValueError:
            numbers = None
        classify = self.r.kind == "classification" or typ in ("int", "str", "bool") or numbers is None \
            or _metric_key(self.task.metric.name) in CLASSIFICATION_METRICS
        if self.r.kind == "regression" and numbers is not None:
            classify = False
        if classify:
            return max(sorted(set(values)), key=values.count)
        mean = sum(numbers) / len(numbers)  # type: ignore[arg-type]
        return str(round(mean)) if typ == "int" else repr(mean)

    def _check_evaluate(self, outcome: dict | None, static: "StaticMetric") -> str | None:
        """evaluate.py's metric name and direction against Evaluation.md's: as its run printed
        them, or (when it was not run to the end) as its source says for certain."""
        outcome = outcome or {}
        if outcome.get("warning"):
            self.warn(outcome["warning"])
        if outcome.get("problem"):
            self.problem(outcome["problem"])
            return None
        printed, hib, seen = outcome.get("metric"), outcome.get("higher_is_better"), ""
        if printed is None:
            printed, hib = static.name, static.higher_is_better
            seen = " (read from its source, without running it)"
        if printed is None and not isinstance(hib, bool):
            return None
        declared = self.task.metric
        if printed is not None and printed != declared.name:
            self.problem(f"evaluate.py prints the metric '{printed}'{seen} but Evaluation.md's '## Metric' says "
                         f"name: {declared.name}; they must be the same name")
        if isinstance(hib, bool) and hib != declared.higher_is_better:
            self.problem(f"evaluate.py prints higher_is_better: {str(hib).lower()}{seen} but Evaluation.md says "
                         f"'{'higher' if declared.higher_is_better else 'lower'} is better'")
        return printed if outcome.get("metric") is not None else None


class _EvaluateRun:
    """evaluate.py on a tiny truth/prediction pair, run in the background while the data is checked.

    With ``--truth`` when evaluate.py supports it (its source mentions the flag); otherwise it is
    run the old way on a trivial prediction for every test id, only to read the metric name it
    prints (the value, a score on the held-out answers, is thrown away)."""

    def __init__(self, task: Task, timeout_s: float, cache_dir: Path | None = None):
        self.task = task
        self.timeout_s = timeout_s
        self.cache_dir = Path(cache_dir) if cache_dir else None
        self.key: str | None = None
        self.cached: dict | None = None
        self.thread: threading.Thread | None = None
        self.stop = threading.Event()
        self.run: EvaluatorRun | None = None
        self.tmp: tempfile.TemporaryDirectory | None = None
        self.with_truth = False
        self.warning: str | None = None
        self.how = ""
        self.started_at: float | None = None
        self.seconds = 0.0                 # evaluate.py's run, until read or stopped
        try:
            self.source = task.evaluator.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            self.source = ""

    def start(self, sample: dict | None) -> None:
        if sample is None:
            return
        r = self.task.resources
        if not self.source:
            return
        own = self.task.assessment().trivial_answer()
        if own is not None:  # an answer kind with its own file: its trivial answer, scored officially
            self.with_truth = False
            self.how = "on the trivial answer"
            self.key = self._key(own, [])
            self.cached = _MEMO.get(self.key) or self._load()
            if self.cached is None:
                self._launch(own, [])
            return
        self.with_truth = "--truth" in self.source
        if not self.with_truth:
            self.warning = ("evaluate.py does not support --truth, so in-loop validation cannot score with the "
                            "task's own metric and falls back to Trellis's built-in metrics; see README "
                            "'Task folders' for the contract")
        self.how = ("with --truth on a truth file of training rows and their trivial prediction" if self.with_truth
                    else "on a trivial prediction for every test id")
        ids = sample["ids"] if self.with_truth else sample["test_ids"]
        if not ids:
            return
        extra = [c for c in r.prediction_columns if c not in (r.id_column, r.target)]
        predictions = [[r.id_column, r.target, *extra], *([i, sample["trivial"], *(["0"] * len(extra))] for i in ids)]
        if sample.get("extra_values") is not None:
            truth = [[r.id_column, r.target, *sample["extra"]],
                     *([i, v, *more] for i, v, more in zip(ids, sample["values"], sample["extra_values"]))]
        else:
            truth = [[r.id_column, r.target], *zip(ids, sample["values"])]
        truth = truth if self.with_truth else []
        self.key = self._key(predictions, truth)
        self.cached = _MEMO.get(self.key) or self._load()
        if self.cached is not None:
            return
        self._launch(predictions, truth)

    def _launch(self, predictions: list, truth: list) -> None:
        self.tmp = tempfile.TemporaryDirectory(prefix="trellis-preflight-")
        folder = Path(self.tmp.name)
        _write_csv(folder / "predictions.csv", predictions)
        files, args = {f"{INPUT_DIR}/predictions.csv": folder / "predictions.csv"}, [f"{INPUT_DIR}/predictions.csv"]
        if self.with_truth:
            _write_csv(folder / "truth.csv", truth)
            files[f"{INPUT_DIR}/truth.csv"] = folder / "truth.csv"
            args += ["--truth", f"{INPUT_DIR}/truth.csv"]
        # In its sandbox, on a thread: the data checks go on meanwhile, and can stop it.
        self.started_at = time.perf_counter()
        self.thread = threading.Thread(target=self._evaluate, args=(files, args), daemon=True,
                                       name="trellis-preflight-evaluate")
        self.thread.start()

    def _evaluate(self, files: dict[str, Path], args: list[str]) -> None:
        try:
            self.run = run_evaluate_py(self.task, files, args, self.timeout_s, with_answers=not self.with_truth,
                                       stop=self.stop)
        except Exception as exc:  # noqa: BLE001 - a sandbox that cannot start is said, not raised in a thread
            self.warning = f"evaluate.py could not be started ({exc})"

    def _key(self, predictions: list, truth: list) -> str:
        """What evaluate.py's answer depends on: the task folder's files (heldout/ included, which
        it reads without --truth), the two files it is given, and the Python running it."""
        h = hashlib.sha256(f"{sys.executable}\0{self.task.fingerprint()}\0{self.with_truth}\0".encode())
        h.update(json.dumps([predictions, truth], default=str).encode())
        heldout = self.task.folder / "heldout"
        if not self.with_truth and heldout.is_dir():
            for path in sorted(p for p in heldout.rglob("*") if p.is_file()):
                h.update(str(path.relative_to(heldout)).encode() + b"\0" + path.read_bytes())
        return h.hexdigest()

    def _load(self) -> dict | None:
        if self.cache_dir is None or self.key is None:
            return None
        try:
            outcome = json.loads((self.cache_dir / f"{self.key}.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(outcome, dict) or "metric" not in outcome:
            return None
        _MEMO[self.key] = outcome
        return outcome

    def _store(self, outcome: dict) -> None:
        if self.key is None:
            return
        _MEMO[self.key] = outcome
        if self.cache_dir is None:
            return
        try:
            self.cache_dir.mkdir(parents=True, exist_ok=True)
            tmp = self.cache_dir / f".{self.key}.{os.getpid()}.tmp"
            tmp.write_text(json.dumps(outcome), encoding="utf-8")
            tmp.replace(self.cache_dir / f"{self.key}.json")
        except OSError:
            pass  # a cache that cannot be written only costs time

    def finish(self, wait: bool = True) -> dict | None:
        """What evaluate.py said. ``wait=False``: only if it has already ended; a run still
        going is stopped, and the outcome names no metric (nothing is remembered)."""
        if self.cached is not None:
            return {**self.cached, "warning": self.warning}
        if self.thread is None:
            return {"metric": None, "warning": self.warning} if self.warning else None
        try:
            if not wait and self.thread.is_alive():
                self.stop.set()
                self.thread.join()
                return {"metric": None, "warning": self.warning}
            self.thread.join()  # its sandbox holds the wall clock (timeout_s)
        finally:
            self.seconds = time.perf_counter() - (self.started_at or time.perf_counter())
            if self.tmp is not None:
                self.tmp.cleanup()
        run = self.run
        if run is None:
            return {"metric": None, "warning": self.warning}
        if run.problem:
            return {"metric": None, "warning": self.warning, "problem": f"{run.problem} {self.how}"}
        outcome = self._read(run.exit_code, run.stdout, run.stderr)
        self._store(outcome)
        return {**outcome, "warning": self.warning}

    def _read(self, returncode: int, stdout: str, stderr: str) -> dict:
        if returncode != 0:
            tail = " | ".join(ln.strip() for ln in stderr.strip().splitlines()[-3:])[-400:]
            return {"metric": None, "problem": f"evaluate.py exited {returncode} {self.how}: {tail or '(no message)'}"}
        line = next((ln for ln in reversed(stdout.splitlines()) if ln.strip().startswith("{")), None)
        try:
            result = json.loads(line) if line else None
        except json.JSONDecodeError:
            result = None
        if not isinstance(result, dict) or "metric" not in result or "value" not in result:
            return {"metric": None, "problem": f"evaluate.py printed no JSON line {{\"metric\": ..., \"value\": ...}} "
                                               f"{self.how} (it printed {stdout.strip()[-200:]!r})"}
        return {"metric": str(result["metric"]), "higher_is_better": result.get("higher_is_better")}


# evaluate.py's answers in this process, by _EvaluateRun._key
_MEMO: dict[str, dict] = {}


# --- evaluate.py's result line, read from its source ------------------------------------------------
@dataclass(frozen=True)
class StaticMetric:
    """The metric name and direction evaluate.py's result line carries, as far as its source
    says for certain; None where only running it can tell."""

    name: str | None = None
    higher_is_better: bool | None = None

    def contradicts(self, declared) -> bool:
        """Does it disagree with Evaluation.md's metric (``Task.metric``)?"""
        return (self.name is not None and self.name != declared.name) or \
            (self.higher_is_better is not None and self.higher_is_better != declared.higher_is_better)


_UNKNOWN = object()
_RESULT_KEYS = ("metric", "higher_is_better")


def printed_metric(source: str) -> StaticMetric:
    """Read evaluate.py's metric name and direction without running it (a few milliseconds
    where its run takes most of a second, mostly importing pandas).

    Every dict literal, and every call keyword, that sets ``"metric"`` (or ``"higher_is_better"``)
    must give it the same literal, or a module-level name bound once to one (``METRIC = "r2"``,
    ``METRIC, HIGHER = "rmse", False``); an item assigned by subscript (``out["metric"] = ...``),
    a name bound twice, rebound in a function or declared global, an expression, an f-string, a
    dict unpacked into another: not certain, None."""
    try:
        tree = python_ast.parse(source)
    except (SyntaxError, ValueError):
        return StaticMetric()
    constants = _module_constants(tree)
    found: dict[str, set] = {k: set() for k in _RESULT_KEYS}
    uncertain: set[str] = set()
    for node in ast.walk(tree):
        entries: list[tuple[str, ast.AST]] = []
        if isinstance(node, ast.Dict):
            entries = [(k.value, v) for k, v in zip(node.keys, node.values)
                       if isinstance(k, ast.Constant) and k.value in _RESULT_KEYS]
            if any(k is None for k in node.keys):  # {**other}: what it brings in is unknown
                uncertain.update(_RESULT_KEYS)
        elif isinstance(node, ast.Call):
            entries = [(kw.arg, kw.value) for kw in node.keywords if kw.arg in _RESULT_KEYS]
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                key = target.slice if isinstance(target, ast.Subscript) else None
                if isinstance(key, ast.Constant) and key.value in _RESULT_KEYS:
                    uncertain.add(key.value)  # result["metric"] = ...: set where the scan cannot follow
        for key, value in entries:
            resolved = _literal(value, constants)
            if resolved is _UNKNOWN:
                uncertain.add(key)
            else:
                found[key].add(resolved)

    def single(key: str, kind: type):
        values = found[key]
        if key in uncertain or len(values) != 1:
            return None
        value = next(iter(values))
        return value if type(value) is kind else None

    return StaticMetric(single("metric", str), single("higher_is_better", bool))


def _literal(node: ast.AST, constants: dict[str, object]) -> object:
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, bool)):
        return node.value
    if isinstance(node, ast.Name) and node.id in constants:
        return constants[node.id]
    return _UNKNOWN


def _module_constants(tree: ast.Module) -> dict[str, object]:
    """Module-level names bound exactly once in the whole file, to a string or bool literal."""
    bindings: dict[str, int] = {}

    def bind(name: str, times: int = 1) -> None:
        bindings[name] = bindings.get(name, 0) + times

    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            bind(node.id)
        elif isinstance(node, ast.arg):
            bind(node.arg)
        elif isinstance(node, ast.alias):
            bind((node.asname or node.name).split(".")[0])
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bind(node.name)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bind(node.name)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            for name in node.names:
                bind(name, 2)  # written from inside a function: never certain
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            bind(node.name)
    constants: dict[str, object] = {}
    for stmt in tree.body:
        pairs: list[tuple[ast.AST, ast.AST]] = []
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target, value = stmt.targets[0], stmt.value
            if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) and len(target.elts) == len(value.elts):
                pairs = list(zip(target.elts, value.elts))
            else:
                pairs = [(target, value)]
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            pairs = [(stmt.target, stmt.value)]
        for target, value in pairs:
            if isinstance(target, ast.Name) and bindings.get(target.id) == 1 and \
                    isinstance(value, ast.Constant) and isinstance(value.value, (str, bool)):
                constants[target.id] = value.value
    return constants


def _write_csv(path: Path, rows: list) -> None:
    with path.open("w", newline="", encoding="utf-8") as fh:
        csv.writer(fh).writerows(rows)


# pandas' default missing-value markers: what a program reading the file with read_csv sees as NaN
NA_VALUES = frozenset({"", "nan", "NaN", "NAN", "-nan", "-NaN", "NA", "N/A", "n/a", "<NA>", "#N/A", "#N/A N/A",
                       "#NA", "-1.#IND", "-1.#QNAN", "1.#IND", "1.#QNAN", "NULL", "null", "None"})


class _Unreadable(Exception):
    pass


class _Column:
    """One CSV column as text, with what preflight asks of it computed once."""

    def __init__(self, path: str, name: str, raw: list[str]):
        self.path, self.name, self.raw = path, name, raw
        self.missing = [i for i, v in enumerate(raw) if v in NA_VALUES]
        self.missing_set = set(self.missing)
        self.present = len(raw) - len(self.missing)
        numbers: list[float | None] = []
        self.first_text: tuple[int, str] = (-1, "")
        for i, v in enumerate(raw):
            if i in self.missing_set:
                numbers.append(None)
                continue
            try:
                numbers.append(float(v))
            except ValueError:
                self.first_text = (i, v)
                break
        self.numeric = self.first_text[0] < 0 and self.present > 0
        self.numbers = numbers if self.numeric else None
        self.infinite = [i for i, v in enumerate(numbers) if v is not None and math.isinf(v)] if self.numeric else []
        self.boolean = self.present > 0 and all(v.lower() in ("true", "false") for i, v in enumerate(raw)
                                                if i not in self.missing_set)
        self.whole = self.numeric and all(v.is_integer() for v in self.finite_numbers())

    def finite_numbers(self) -> list[float]:
        return [v for v in (self.numbers or []) if v is not None and math.isfinite(v)]

    def labels(self) -> list:
        """The distinct values, sorted, as Python values: ints for whole numbers, bools, else text."""
        if self.boolean:
            return sorted({v.lower() == "true" for i, v in enumerate(self.raw) if i not in self.missing_set})
        if self.numeric:
            return sorted({int(v) if v.is_integer() else v for v in self.finite_numbers()})
        return sorted({v for i, v in enumerate(self.raw) if i not in self.missing_set})

    def duplicate_rows(self) -> list[int]:
        seen: dict[str, int] = {}
        dups = []
        for i, v in enumerate(self.raw):
            if i in self.missing_set:
                continue
            key = repr(self.numbers[i]) if self.numbers is not None else v  # "1" and "1.0" are one id
            if key in seen:
                dups += [seen[key], i] if seen[key] >= 0 else [i]
                seen[key] = -1
            else:
                seen[key] = i
        return sorted(dups)


class _Table:
    """A CSV file read once with the csv module (no pandas: preflight must stay far under a second)."""

    def __init__(self, path: str, names: list[str], rows: list[list[str]]):
        self.path, self.names, self.n_rows = path, names, len(rows)
        self.duplicated_names = sorted({n for n in names if names.count(n) > 1})
        self._columns = {n: k for k, n in enumerate(names)}
        self._rows = rows
        self._cache: dict[str, _Column] = {}

    @classmethod
    def read(cls, file: Path, rel: str) -> "_Table":
        try:
            with file.open(encoding="utf-8", newline="") as fh:
                reader = csv.reader(fh)
                header = next(reader, None)
                if header is None or not any(h.strip() for h in header):
                    raise _Unreadable(f"{rel}: is empty; it needs a header line and at least one row")
                names = [h.strip() for h in header]
                rows = []
                for row in reader:
                    if not row:
                        continue  # a blank line, as read_csv skips it
                    if len(row) != len(names):
                        raise _Unreadable(f"{rel}: line {reader.line_num} has {len(row)} field(s) but the header "
                                          f"has {len(names)}")
                    rows.append([v.strip() for v in row])
        except UnicodeDecodeError as exc:
            raise _Unreadable(f"{rel}: is not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
        except csv.Error as exc:
            raise _Unreadable(f"{rel}: is not a readable CSV file ({exc})") from exc
        return cls(rel, names, rows)

    def __contains__(self, name: object) -> bool:
        return name in self._columns

    def __getitem__(self, name: str) -> _Column:
        if name not in self._cache:
            k = self._columns[name]
            self._cache[name] = _Column(self.path, name, [row[k] for row in self._rows])
        return self._cache[name]


def _feature_range(a: _Column, b: _Column) -> FeatureRange:
    xa, xb = a.finite_numbers(), b.finite_numbers()
    if not xa or not xb:
        nan = float("nan")
        return FeatureRange(nan, nan, nan, nan)
    lo, hi = min(xa), max(xa)
    return FeatureRange(train_min=lo, train_max=hi, test_min=min(xb), test_max=max(xb),
                        test_below=sum(v < lo for v in xb), test_above=sum(v > hi for v in xb), test_rows=len(xb))
