"""Plausibility checks: is a delivered answer physically and statistically believable?

The execution checks (engine/checks.py) say that a program ran and wrote a well-formed
file; these say whether its numbers can be trusted, from facts the engine computes itself
on the task's data. They are public checks: the verifier cannot overrule them.

- ``finite``: every prediction is a finite number (regression) or a class seen in the
  training target (classification).
- ``within_range``: predictions respect the declared bounds of the target
  (``constraints.min``/``max``) and its monotonicity in an input; a bound the task does not
  declare is the training target's range widened by ``RANGE_MARGIN`` spans, scaled up by
  how far the test inputs reach beyond the training inputs (see ``range_margin``).
- ``beats_trivial``: Trellis's own validation score of the program is not worse than the best
  trivial baseline (engine/baselines.py: constant, nearest neighbour) scored on the very same
  folds; never the score the program prints, which only the program vouches for.
- ``claims_match``: a score stated in a report equals a measured one, up to the rounding
  of the statement (the fabrication detector); where Trellis measured the metric itself (in-loop
  validation, scored by evaluate.py --truth), a stated score must also agree with that
  measurement within its fold-to-fold noise, whatever the program printed.
"""
from __future__ import annotations

import io
import json
import math
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Sequence

import numpy as np
import pandas as pd

from .checks import Check
from .metrics import METRICS
from .selection import ROUNDED, better
from .task_kind import decide_kind

if TYPE_CHECKING:  # a task holds its assessment (engine/task.py): the type only, never the module
    from .task import Task

# How far (in spans of the training target) an undeclared bound lies beyond the training
# target's range, before scaling for extrapolation. One span lets an interpolating model
# overshoot by as much as the whole observed variation; values 100x off still fall outside.
RANGE_MARGIN = 1.0
# Allowed decrease of a curve declared increasing (and vice versa), as a fraction of the span
# of all the predictions: the wiggle of a tree ensemble on noisy data passes, a curve that
# turns back does not.
MONOTONE_TOLERANCE = 0.02
CLASSIFICATION_METRICS = {"accuracy", "balanced_accuracy", "f1", "f1_macro", "precision", "recall",
                          "log_loss", "auc", "roc_auc", "error_rate"}
REGRESSION_METRICS = {"rmse", "mae", "mse", "r2", "relative_l2", "mape", "max_error"}
# Spellings programs and reports use for a metric, mapped to the task's metric names.
_ALIASES = {"rel_l2": "relative_l2", "relative_l2_error": "relative_l2", "rel_l2_error": "relative_l2",
            "r_2": "r2", "r_squared": "r2", "rsquared": "r2", "r2_score": "r2", "acc": "accuracy",
            "root_mean_squared_error": "rmse", "mean_absolute_error": "mae", "mean_squared_error": "mse",
            "balanced_acc": "balanced_accuracy"}
_METRIC_NAMES = {*METRICS, *CLASSIFICATION_METRICS, *REGRESSION_METRICS}
_VALIDATION_WORDS = ("validation", "valid", "val", "cv", "holdout", "hold_out", "oof", "out_of_fold",
                     "cross_validation", "cross_validated")
_OTHER_QUALIFIERS = ("official", "test", "heldout", "held_out", "in_loop", "mean", "final", "measured",
                     "score", "train", "training", "fit")
_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"


# --------------------------------------------------------------------- metric names

def canonical_metric(name: str) -> tuple[str, str]:
    """(metric, qualifier) of a printed score name: 'validation_rel_l2' -> ('relative_l2',
    'validation'); 'R²' -> ('r2', ''); 'train r2' -> ('r2', 'train')."""
    s = re.sub(r"[^a-z0-9]+", "_", name.lower().replace("²", "2")).strip("_")
    qualifier = ""
    changed = True
    while changed and s not in _ALIASES and s not in _METRIC_NAMES:
        changed = False
        for word in sorted((*_VALIDATION_WORDS, *_OTHER_QUALIFIERS), key=len, reverse=True):
            for pattern in (f"{word}_", f"_{word}"):
                if (s.startswith(pattern) if pattern.endswith("_") else s.endswith(pattern)) and len(s) > len(pattern):
                    s = s[len(pattern):] if pattern.endswith("_") else s[: -len(pattern)]
                    qualifier = qualifier or ("validation" if word in _VALIDATION_WORDS else word)
                    changed = True
                    break
            if changed:
                break
    return _ALIASES.get(s, s), qualifier


def _known_metrics(extra: Iterable[str] = ()) -> set[str]:
    return {*METRICS, *CLASSIFICATION_METRICS, *REGRESSION_METRICS, *(canonical_metric(m)[0] for m in extra)}


# ----------------------------------------------------------------- reading scores

@dataclass(frozen=True)
class Score:
    """A score found in text: which metric, how it was qualified, its value and the
    half-width of the rounding it was written with."""

    metric: str
    qualifier: str
    value: float
    rounding: float
    text: str


def _rounding(number: str, percent: bool) -> float:
    mantissa, _, exponent = number.lower().partition("e")
    decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
    half = 0.5 * 10.0 ** (int(exponent or 0) - decimals)
    return half / 100 if percent else half


def scores_in(text: str, metrics: Iterable[str] = ()) -> list[Score]:
    """Every '<metric> = value' / '<metric>: value' statement and JSON score line in ``text``,
    for the known metric names (plus ``metrics``), in order of appearance."""
    known = _known_metrics(metrics)
    found: list[Score] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("{"):
            try:
                obj = json.loads(stripped)
            except json.JSONDecodeError:
                obj = None
            if isinstance(obj, dict):
                found += _json_scores(obj, known)
                continue
        pattern = (r"(?P<name>[A-Za-z][A-Za-z0-9_²\- ]{0,40}?)\s*(?:=|:|\bis\b|\bof\b)\s*\**\s*"
                   rf"(?P<value>{_NUMBER})(?P<pct>\s*%)?")
        for m in re.finditer(pattern, line):
            # the metric is the name's last words: "the model reached validation r2"
            words = m.group("name").strip().split()
            for start in range(max(0, len(words) - 4), len(words)):
                metric, qualifier = canonical_metric(" ".join(words[start:]))
                if metric in known:
                    break
            else:
                continue
            raw = m.group("value")
            percent = bool(m.group("pct"))
            value = float(raw) / (100 if percent else 1)
            text = f"{' '.join(words[start:])} = {raw}{'%' if percent else ''}"
            found.append(Score(metric, qualifier, value, _rounding(raw, percent), text))
    return found


def _json_scores(obj: dict, known: set[str], prefix: str = "") -> list[Score]:
    out: list[Score] = []
    if isinstance(obj.get("metric"), str) and isinstance(obj.get("value"), (int, float)):
        metric, qualifier = canonical_metric(obj["metric"])
        words = " ".join(str(v) for v in obj.values() if isinstance(v, str)) + " " + " ".join(obj) + " " + prefix
        if any(w in re.split(r"[^a-z]+", words.lower()) for w in _VALIDATION_WORDS):
            qualifier = "validation"
        if metric in known:
            out.append(Score(metric, qualifier, float(obj["value"]), 0.0, json.dumps(obj)[:120]))
        return out
    for key, value in obj.items():
        name = f"{prefix}_{key}" if prefix else str(key)
        if isinstance(value, dict):
            out += _json_scores(value, known, name)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            metric, qualifier = canonical_metric(name)
            if metric in known:
                out.append(Score(metric, qualifier, float(value), 0.0, f"{name}: {value}"))
    return out


def reported_validation(stdout: str, metric: str) -> Score | None:
    """The program's own validation score for ``metric``: the last clearly labelled one."""
    want = canonical_metric(metric)[0]
    hits = [s for s in scores_in(stdout, [metric]) if s.metric == want and s.qualifier == "validation"]
    return hits[-1] if hits else None


# ---------------------------------------------------------------- the task's data

@dataclass(frozen=True)
class TaskData:
    """What the checks need from the task's files, read once."""

    kind: str                        # regression / classification
    target: pd.Series                # training target, NaNs dropped
    train: pd.DataFrame
    test: pd.DataFrame | None        # test features
    features: tuple[str, ...]

    @property
    def classes(self) -> list:
        return sorted(self.target.unique().tolist(), key=str)


def infer_kind(declared: str | None, metric: str, contract_type: str | None, target: pd.Series) -> str:
    """The task's kind, decided where every part of Trellis decides it (engine/task_kind.py)."""
    return decide_kind(declared, metric, contract_type, target.astype(str).tolist()).kind


def task_data(task: Task) -> TaskData | None:
    """The training and test tables of a task with Data_config.json, or None when the task
    declares no training file and target (then there is nothing to compare against)."""
    r = task.resources
    if not r.target or "train" not in r.files:
        return None
    train_path = task.folder / r.files["train"]
    test_path = task.folder / r.files["test_features"] if "test_features" in r.files else None
    return _load(str(train_path), _stamp(train_path), str(test_path) if test_path else None,
                 _stamp(test_path) if test_path else None, r.target, tuple(r.features),
                 getattr(r, "kind", None), task.metric.name, r.prediction_columns.get(r.target))


def _stamp(path: Path) -> tuple[float, int]:
    st = path.stat()
    return st.st_mtime, st.st_size


@lru_cache(maxsize=16)
def _load(train_path: str, _train_stamp, test_path: str | None, _test_stamp, target: str,
          features: tuple[str, ...], kind: str | None, metric: str, contract_type: str | None) -> TaskData:
    train = pd.read_csv(train_path)
    if target not in train.columns:
        raise ValueError(f"{train_path}: no target column {target!r}")
    test = pd.read_csv(test_path) if test_path else None
    y = train[target].dropna()
    if not features and test is not None:
        features = tuple(c for c in test.columns if c in train.columns and c != target)
    return TaskData(infer_kind(kind, metric, contract_type, y), y, train, test, tuple(features))


# ------------------------------------------------------------------ the checks

def read_predictions(data: bytes, column: str) -> pd.DataFrame:
    """The predictions file as text columns (a float parse happens per check)."""
    return pd.read_csv(io.BytesIO(data), dtype=str, keep_default_na=False)


def finite(values: Sequence[str], kind: str, classes: Sequence | None = None, column: str = "target") -> Check:
    """Regression: every value a finite number. Classification: every value a known class."""
    if kind == "classification":
        known = {_label(c) for c in (classes or [])}
        unknown = [v for v in values if _label(v) not in known]
        if unknown:
            shown = ", ".join(repr(v) for v in list(dict.fromkeys(unknown))[:5])
            return Check("finite", False, f"{len(unknown)} of {len(values)} predictions of {column!r} are not a "
                         f"class of the training target ({shown}; classes: "
                         f"{', '.join(map(str, list(classes or [])[:10]))})")
        return Check("finite", True, f"all {len(values)} predictions of {column!r} are known classes")
    numbers = pd.to_numeric(pd.Series(list(values), dtype=object), errors="coerce").to_numpy(dtype=float)
    bad = ~np.isfinite(numbers)
    if bad.any():
        examples = ", ".join(repr(v) for v in [v for v, b in zip(values, bad) if b][:5])
        return Check("finite", False, f"{int(bad.sum())} of {len(values)} predictions of {column!r} are not finite "
                     f"numbers ({examples})")
    return Check("finite", True, f"all {len(values)} predictions of {column!r} are finite")


def _label(value: object) -> str:
    """A class label compared across files: '1', '1.0' and 1 are the same class."""
    text = str(value).strip()
    try:
        number = float(text)
    except ValueError:
        return text
    return repr(int(number)) if math.isfinite(number) and number == int(number) else repr(number)


def extrapolation(train: pd.DataFrame, test: pd.DataFrame | None, features: Sequence[str]) -> tuple[float, str | None, str | None]:
    """How far the test inputs reach beyond the training inputs, in training spans of the
    feature that reaches farthest: (distance, feature, side 'upper'/'lower')."""
    best: tuple[float, str | None, str | None] = (0.0, None, None)
    if test is None:
        return best
    for f in features:
        if f not in train.columns or f not in test.columns:
            continue
        a = pd.to_numeric(train[f], errors="coerce").dropna()
        b = pd.to_numeric(test[f], errors="coerce").dropna()
        if a.empty or b.empty:
            continue
        span = float(a.max() - a.min())
        if span <= 0:
            continue
        for side, beyond in (("upper", float(b.max() - a.max())), ("lower", float(a.min() - b.min()))):
            if beyond / span > best[0]:
                best = (beyond / span, f, side)
    return best


def range_margin(span: float, reach: float) -> float:
    """The margin beyond the training target's range: RANGE_MARGIN spans, times (1 + reach)²
    when the test inputs lie ``reach`` input spans beyond the training inputs, so that a
    curve growing up to quadratically in its input extrapolates inside the bound."""
    return RANGE_MARGIN * span * (1.0 + reach) ** 2


def within_range(predictions: pd.DataFrame, column: str, target: pd.Series, *, low: float | None = None,
                 high: float | None = None, monotone: dict[str, str] | None = None,
                 test: pd.DataFrame | None = None, id_column: str | None = None, reach: float = 0.0) -> Check:
    """Predictions inside the declared bounds (an undeclared side: the training range plus a
    margin), and monotone where declared, on the predictions sorted by that input."""
    values = pd.to_numeric(predictions[column], errors="coerce").to_numpy(dtype=float)
    values = values[np.isfinite(values)]
    y = pd.to_numeric(target, errors="coerce").dropna().to_numpy(dtype=float)
    problems, said = [], []
    if len(y):
        y_min, y_max = float(y.min()), float(y.max())
        span = (y_max - y_min) or max(abs(y_max), 1e-12)
        margin = range_margin(span, reach)
        lo_bound = low if low is not None else y_min - margin
        hi_bound = high if high is not None else y_max + margin
        said.append(f"bounds [{lo_bound:.4g}, {hi_bound:.4g}] ("
                    + ("declared min" if low is not None else "training min - margin") + ", "
                    + ("declared max" if high is not None else "training max + margin") + ")")
    else:
        lo_bound, hi_bound = low, high
    slack = 1e-9 * max(1.0, abs(lo_bound or 0), abs(hi_bound or 0))
    if len(values) and lo_bound is not None and (below := values < lo_bound - slack).any():
        problems.append(f"{int(below.sum())} of {len(values)} predictions below {lo_bound:.4g} (lowest {values.min():.4g})")
    if len(values) and hi_bound is not None and (above := values > hi_bound + slack).any():
        problems.append(f"{int(above.sum())} of {len(values)} predictions above {hi_bound:.4g} (highest {values.max():.4g})")
    for col, direction in (monotone or {}).items():
        message = _monotone(predictions, column, test, id_column, col, direction)
        (problems if message and not message.startswith("not checked") and not message.startswith("monotone")
         else said).append(message)
    if problems:
        return Check("within_range", False, "; ".join(problems))
    return Check("within_range", True, "; ".join(s for s in said if s) or "no bounds to check")


def _monotone(predictions: pd.DataFrame, column: str, test: pd.DataFrame | None, id_column: str | None,
              col: str, direction: str) -> str:
    """'' / 'not checked: ...' / 'monotone ...' when fine; otherwise what breaks it."""
    if test is None or id_column is None or col not in test.columns or id_column not in predictions.columns:
        return f"not checked: monotone in {col!r} needs the test features' {col!r} and id columns"
    left = test.assign(**{id_column: test[id_column].astype(str).str.strip()})
    right = predictions[[id_column, column]].assign(**{id_column: predictions[id_column].astype(str).str.strip()})
    joined = left.merge(right.rename(columns={column: "__prediction"}), on=id_column, how="inner")
    joined["__x"] = pd.to_numeric(joined[col], errors="coerce")
    joined["__p"] = pd.to_numeric(joined["__prediction"], errors="coerce")
    joined = joined.dropna(subset=["__x", "__p"])
    # Other inputs held fixed: compare only rows that agree on every other feature.
    others = [c for c in test.columns if c not in {id_column, col}]
    if others:  # only groups of two rows or more can show a slope
        sizes = joined.groupby(others, dropna=False)["__x"].transform("size")
        groups = [g for _, g in joined[sizes >= 2].groupby(others, dropna=False, sort=False)]
    else:
        groups = [joined]
    sign = 1.0 if direction == "increasing" else -1.0
    span = float(joined["__p"].max() - joined["__p"].min()) if len(joined) else 0.0
    checked, worst = 0, None
    for g in groups:
        x, where = np.unique(g["__x"].to_numpy(dtype=float), return_inverse=True)
        if len(x) < 2:
            continue
        checked += 1
        # one value per input value (their mean, should rows repeat an input)
        p = np.bincount(where, weights=g["__p"].to_numpy(dtype=float)) / np.bincount(where) * sign
        # against the highest value so far, so a curve turning back in small steps is seen too
        peak = np.maximum.accumulate(p)[:-1]
        drops = peak - p[1:]
        i = int(np.argmax(drops))
        if drops[i] > MONOTONE_TOLERANCE * span:
            j = int(np.argmax(p[: i + 1]))  # where the peak was
            found = (float(drops[i]), x[j], p[j] * sign, x[i + 1], p[i + 1] * sign)
            worst = found if worst is None or found[0] > worst[0] else worst
    if checked == 0:
        return f"not checked: no rows share the other inputs, so monotone in {col!r} cannot be seen"
    if worst:
        _, x0, p0, x1, p1 = worst
        verb = "falls" if direction == "increasing" else "rises"
        return (f"not {direction} in {col!r}: the prediction {verb} from {p0:.4g} at {col}={x0:.4g} to {p1:.4g} at "
                f"{col}={x1:.4g} (more than {MONOTONE_TOLERANCE:.0%} of the predictions' span, {span:.4g})")
    return f"monotone {direction} in {col!r}"


# ------------------------------------------------------------ trivial baseline

def beats_trivial(validation: dict | None, metric: str, higher_is_better: bool) -> Check:
    """Trellis's validation score of a program (``validation``: engine/validation.py's result,
    its mean over the folds and each trivial baseline's mean over the same folds) against the
    best baseline: a program worse than a constant or its nearest training row on the very
    question it was asked has learned nothing, or learned wrong. What the program printed is
    not read: a flattering number it prints earns nothing here."""

    if not validation or not validation.get("ok") or not isinstance(validation.get("value"), (int, float)) \
            or not math.isfinite(validation["value"]):
        why = (validation or {}).get("error") or "no validation score"
        return Check("beats_trivial", True, f"not checked: Trellis has no validation {metric} of it ({why})")
    value = float(validation["value"])
    refs = {name: float(b) for name, b in (validation.get("baselines") or {}).items()
            if isinstance(b, (int, float)) and math.isfinite(b)}
    folds = validation.get("splits") or len(validation.get("split_values") or []) or "its"
    if not refs:
        return Check("beats_trivial", True, f"Trellis's validation {metric} = {value:.4g} over {folds} folds; "
                     "no trivial baseline could be scored on the same folds")
    best = (max if higher_is_better else min)(refs, key=refs.get)
    shown = ", ".join(f"{name.replace('_', ' ')} {b:.4g}" for name, b in refs.items())
    detail = f"Trellis's validation {metric} = {value:.4g} over {folds} folds; trivial baselines on the same folds: {shown}"
    if better(refs[best], value, higher_is_better, max(abs(refs[best]), abs(value)), ROUNDED):
        return Check("beats_trivial", False, f"{detail}: worse than the {best.replace('_', ' ')} "
                     f"({'higher' if higher_is_better else 'lower'} is better)")
    return Check("beats_trivial", True, detail)


# ------------------------------------------------------------------ claims

@dataclass(frozen=True)
class Measured:
    """A score the engine can vouch for: the program's printed output, or an evaluation."""

    metric: str
    value: float
    source: str


def measured_in(stdout: str, source: str = "the program's output", metrics: Iterable[str] = ()) -> list[Measured]:
    return [Measured(s.metric, s.value, f"{source}: {s.text}") for s in scores_in(stdout, metrics)]


# Qualifiers of a stated score that say it is not a claim about unseen rows: checked against
# what the program printed, never against Trellis's validation measurement.
_IN_SAMPLE_QUALIFIERS = frozenset({"train", "training", "fit"})
# A stated validation score agrees with Trellis's measurement when it lies within the range of
# Trellis's fold values widened by this share of their mean (or their standard deviation, if
# larger). A program's own single hold-out (other rows, often fewer: two of twelve sites where
# Trellis's folds hold three) honestly lands up to about a third away from the folds' mean,
# while a report claiming R² 0.95 where Trellis measured 0.41, or 0.9 where it measured -4,
# lies far outside.
CLAIM_NOISE = 0.3


@dataclass(frozen=True)
class Reference:
    """Trellis's own measurement of the task's metric on unseen rows: the mean over its
    validation folds (each scored by the task's evaluate.py --truth) and the folds' values."""

    metric: str
    value: float
    folds: tuple[float, ...]
    source: str

    def band(self) -> tuple[float, float]:
        values = [v for v in self.folds if math.isfinite(v)] or [self.value]
        noise = max(float(np.std(values, ddof=1)) if len(values) > 1 else 0.0, CLAIM_NOISE * abs(self.value))
        return min(values) - noise, max(values) + noise

    def describe(self) -> str:
        folds = [v for v in self.folds if math.isfinite(v)]
        spread = (f"; folds {min(folds):.4g} to {max(folds):.4g}" if len(folds) > 1 else "")
        return f"Trellis measured {self.metric} = {self.value:.4g} ({self.source}{spread})"

    @classmethod
    def from_validation(cls, metric: dict | None, name: str) -> "Reference | None":
        """The reference in an in-loop validation result (Assessment.validate, engine/assessment),
        or None when the validation did not score."""
        if not metric or not metric.get("ok") or not isinstance(metric.get("value"), (int, float)):
            return None
        value = float(metric["value"])
        if not math.isfinite(value):
            return None
        folds = tuple(float(v) for v in metric.get("split_values") or [] if isinstance(v, (int, float)))
        plan = metric.get("validation") or {}
        where = f"{len(folds) or 1} validation fold(s)" + (f", {plan['split']} split" if plan.get("split") else "")
        scorer = ("Trellis's built-in metric" if metric.get("scorer") == "built-in"
                  else "the task's evaluate.py --truth")
        return cls(name, value, folds, f"{where}, scored by {scorer}")


def claims_match(text: str, measured: Sequence[Measured], where: str = "the final report",
                 metrics: Iterable[str] = (), reference: Reference | None = None) -> Check | None:
    """Each score ``text`` states must equal a measured score of the same metric, up to the
    rounding it is written with. With a ``reference`` (Trellis's own measurement), each stated
    score of that metric that is not qualified as a training score must also lie within the
    reference's noise band: a report that faithfully repeats a number the program printed is
    still refused when Trellis measured something else. None when no stated score has a
    measurement to compare."""
    by_metric: dict[str, list[Measured]] = {}
    options = list(measured)
    if reference is not None:
        options.append(Measured(reference.metric, reference.value, reference.describe()))
        options += [Measured(reference.metric, v, f"Trellis's validation fold {k + 1}")
                    for k, v in enumerate(reference.folds)]
    for m in options:
        if math.isfinite(m.value):
            by_metric.setdefault(canonical_metric(m.metric)[0], []).append(m)
    ref_metric = canonical_metric(reference.metric)[0] if reference is not None else None
    claims = [c for c in scores_in(text, [*metrics, *([reference.metric] if reference else [])])
              if c.metric in by_metric and math.isfinite(c.value)]
    if not claims:
        return None
    wrong = []
    for c in claims:
        tolerance = c.rounding + 1e-9 * max(1.0, abs(c.value))
        if reference is not None and c.metric == ref_metric and c.qualifier not in _IN_SAMPLE_QUALIFIERS:
            lo, hi = reference.band()
            if not lo - tolerance <= c.value <= hi + tolerance:
                printed = [m for m in measured if canonical_metric(m.metric)[0] == c.metric and math.isfinite(m.value)]
                also = ("; " + "; ".join(f"{m.value:.6g} ({m.source})" for m in printed[:2])) if printed else ""
                wrong.append(f"{c.text!r} but {reference.describe()}, outside [{lo:.4g}, {hi:.4g}]{also}")
                continue
        if not any(abs(c.value - m.value) <= tolerance for m in by_metric[c.metric]):
            shown = "; ".join(f"{m.value:.6g} ({m.source})" for m in by_metric[c.metric][:3])
            wrong.append(f"{c.text!r} but measured {c.metric}: {shown}")
    if wrong:
        return Check("claims_match", False, f"{where} states " + "; ".join(wrong))
    against = " and Trellis's validation measurement" if reference is not None else ""
    return Check("claims_match", True, f"{len(claims)} score(s) stated in {where} match the measured values{against}")


# ------------------------------------------------------------------ together

def fold_data(task: Task, fit_csv: bytes, features_csv: bytes) -> TaskData | None:
    """A validation fold as the checks see a task: the rows the program was fitted on as its
    training data, the fold's validation features as its test file (so bounds, monotonicity and
    the reach beyond the fitted range are those of the question this fold asked). The task's
    kind and features stay the whole task's."""
    whole = task_data(task)
    target = task.resources.target
    if whole is None or target is None:
        return None
    fit = pd.read_csv(io.BytesIO(fit_csv))
    if target not in fit.columns:
        raise ValueError(f"the fold's training rows have no target column {target!r}")
    test = pd.read_csv(io.BytesIO(features_csv))
    return TaskData(whole.kind, fit[target].dropna(), fit, test, whole.features)


def plausibility_checks(task: Task, predictions_csv: bytes, stdout: str, data: TaskData | None = None) -> list[Check]:
    """finite and within_range (regression) for one verified execution: on the task's own data,
    or on ``data`` (a validation fold, see ``fold_data``). beats_trivial is not among them: it
    needs Trellis's validation of the program (``beats_trivial``, after the validation), and
    ``stdout``, what the program says of itself, is no score."""
    r = task.resources
    try:
        data = data if data is not None else task_data(task)
    except (OSError, ValueError, pd.errors.ParserError) as exc:
        return [Check("finite", False, f"could not read the task's data to check the predictions: {exc}")]
    if data is None or r.target is None:
        return []
    try:
        predictions = read_predictions(predictions_csv, r.target)
    except (ValueError, pd.errors.ParserError) as exc:
        return [Check("finite", False, f"{r.predictions_file} could not be read: {exc}")]
    if r.target not in predictions.columns:
        return [Check("finite", False, f"{r.predictions_file} has no column {r.target!r}")]
    checks = [finite(predictions[r.target].tolist(), data.kind, data.classes, r.target)]
    reach = _guarded("within_range", lambda: extrapolation(data.train, data.test, data.features))
    if isinstance(reach, Check):
        return checks + [reach]
    if data.kind == "regression":
        constraints = getattr(r, "constraints", None)
        checks.append(_guarded("within_range", lambda: within_range(
            predictions, r.target, data.target, low=getattr(constraints, "min", None),
            high=getattr(constraints, "max", None), monotone=dict(getattr(constraints, "monotone", None) or {}),
            test=data.test, id_column=r.id_column, reach=reach[0])))
    return checks


def _guarded(name: str, compute):
    """A check the engine could not compute on this data says so and passes: an engine fault
    is not a verdict on the team's answer, and must not block every run of the task."""
    try:
        return compute()
    except Exception as exc:  # noqa: BLE001 - any failure of the check itself, reported in its detail
        return Check(name, True, f"not checked: the engine could not compute it ({type(exc).__name__}: {exc})")
