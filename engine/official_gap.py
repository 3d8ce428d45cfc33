"""Is the team's official lead over a baseline bigger than the test set's own noise?

The official metric is one number on one finite test set. When the team scores 0.486 and the
single agent 0.512 on 88 rows, the question a reader asks is whether that gap would survive
another draw of 88 rows from the same population. This module answers it after the final
commitment (never inside a search) with a paired bootstrap over the test rows: each resample
draws the held-out rows with replacement, scores the team's and the baseline's predictions on
the *same* rows, and keeps the difference. The 95 % percentile interval of those differences
gives the verdict: the team is better (the interval lies above zero), worse (below zero), or
the two are within the test set's noise. A forecast of several series (answer kind ``series``)
is resampled by whole series instead: its rows share their series' errors and scale, so drawing
rows would pretend there were as many independent tests as rows. Each file is scored on each
series alone and, where the official score is the mean of those, the series are drawn.

The scorer stays the task's evaluate.py. A resample is scored by the engine's own
implementation of the metric (engine/metrics.py, batched here) only when that implementation
reproduces evaluate.py's official value of every compared file on the whole test set; otherwise
each resample is written out and scored by evaluate.py ``--truth`` (fewer resamples: one process
fork each). The held-out targets are read from the task's ``heldout/`` folder
(engine.official.heldout_truth); a task that keeps them elsewhere gets no interval, said so.
"""
from __future__ import annotations

import csv
import math
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from .evaluation import FoldJob, evaluate_folds, supports_truth
from . import official
from .selection import better
from .bundle.parts import PartMissing, id_key, parse_predictions
from .task import Task

LEVEL = 0.95
# Fewer independent units than this to draw and the bootstrap has too few distinct resamples to
# say anything (two series give three): no interval, and no "beyond noise" from it.
MIN_UNITS = 5
RESAMPLES = 2000           # scored in this process by the engine's metric
RESAMPLES_EVALUATE = 200   # scored by evaluate.py, one fork per file
_BLOCK = 2_000_000         # elements of one resample block (resamples x rows), bounding memory


@dataclass(frozen=True)
class Gap:
    """The final team's official score against one baseline's, with the bootstrap interval."""

    baseline: str
    difference: float | None = None   # team minus baseline, oriented: positive = the team is better
    low: float | None = None          # LEVEL interval of the difference over the resamples
    high: float | None = None
    rows: int = 0
    resamples: int = 0
    scorer: str = ""                  # what scored each resample
    verdict: str = ""                 # "better", "worse", "within noise", "identical"; "" = not computed
    why: str = ""                     # why there is no interval
    resampled: str = ""               # what one resample draws, when not the held-out rows ("7 whole series")

    def to_dict(self) -> dict:
        return asdict(self)

    def method(self) -> str:
        """How the interval was made (the same for every baseline of one run)."""
        drawn = self.resampled or f"{self.rows} held-out rows"
        return f"paired bootstrap, {self.resamples} resamples of the {drawn}, scored by {self.scorer}"

    def describe(self) -> str:
        """One line: the lead (positive = the team is better), its interval and the verdict."""
        name = self.baseline.replace("_", " ")
        if not self.verdict:
            return f"lead over {name}: no interval ({self.why})"
        if self.verdict == "identical":
            return f"lead over {name}: none, the same prediction on every held-out row"
        said = {"better": "better beyond the test set's noise", "worse": "WORSE beyond the test set's noise",
                "within noise": "within the test set's noise"}[self.verdict]
        return f"lead over {name}: {self.difference:+.4g}, 95 % [{self.low:+.4g}, {self.high:+.4g}]: {said}"


def describe_gaps(gaps: list["Gap"]) -> list[str]:
    """The run summary's lines: how the intervals were made, then one line per baseline."""
    made = next((g.method() for g in gaps if g.verdict and g.resamples), "")
    return ([f"the team's official lead (positive = better; {made}):"] if made else []) + \
        ["  " + g.describe() for g in gaps]


# --- the engine's metrics, over many resamples at once ---------------------------------------------
def _rmse(p: np.ndarray, t: np.ndarray) -> np.ndarray:
    return np.sqrt(((p - t) ** 2).mean(axis=1))


def _mae(p: np.ndarray, t: np.ndarray) -> np.ndarray:
    return np.abs(p - t).mean(axis=1)


def _relative_l2(p: np.ndarray, t: np.ndarray) -> np.ndarray:
    den = np.sqrt((t ** 2).sum(axis=1))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, np.sqrt(((p - t) ** 2).sum(axis=1)) / np.where(den > 0, den, 1), np.inf)


def _r2(p: np.ndarray, t: np.ndarray) -> np.ndarray:
    ss_tot = ((t - t.mean(axis=1, keepdims=True)) ** 2).sum(axis=1)
    ss_res = ((t - p) ** 2).sum(axis=1)
    return np.where(ss_tot > 0, 1.0 - ss_res / np.where(ss_tot > 0, ss_tot, 1), 0.0)


def _accuracy(p: np.ndarray, t: np.ndarray) -> np.ndarray:
    return (p == t).mean(axis=1)


# Same definitions as engine/metrics.py (a unit test holds them together), one row per resample.
BATCHED: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "rmse": _rmse, "mae": _mae, "relative_l2": _relative_l2, "r2": _r2, "accuracy": _accuracy}


# --- reading ---------------------------------------------------------------------------------------
def _encode(columns: list[list[str]]) -> np.ndarray:
    """The columns as one numeric matrix: numbers as numbers, labels as shared integer codes (so
    ``2`` and ``2.0`` are one class, ``"red"`` and ``"red"`` are one class)."""
    try:
        return np.array([[float(v) for v in col] for col in columns], dtype=float)
    except ValueError:
        codes: dict[str, int] = {}
        return np.array([[codes.setdefault(_label(v), len(codes)) for v in col] for col in columns], dtype=float)


def _label(text: str) -> str:
    try:
        number = float(text)
    except ValueError:
        return text
    return repr(number) if math.isfinite(number) else text


# --- the comparison ---------------------------------------------------------------------------------
def official_gaps(task: Task, team: bytes | None, team_official: dict,
                  baselines: dict[str, tuple[bytes | None, dict]], seed: int = 0) -> dict[str, Gap]:
    """For each baseline ``name -> (its predictions, its official score)``, the final team's
    official lead and its bootstrap interval over the held-out rows. A baseline without
    predictions or an official score, or a task whose held-out targets cannot be read, gets a
    Gap that says why instead of an interval."""
    out: dict[str, Gap] = {}
    comparable = {name: data for name, (data, score) in baselines.items()
                  if data is not None and score.get("ok")}
    for name, (data, score) in baselines.items():
        if name not in comparable:
            out[name] = Gap(name, why="the baseline has no official score" if not score.get("ok")
                            else "its predictions file is not at hand")
    if not comparable:
        return out
    if team is None or not team_official.get("ok"):
        return {**out, **{name: Gap(name, why="the team has no official score") for name in comparable}}
    if task.assessment().answer_columns() is not None:
        why = f"{task.assessment().title} has no held-out rows to resample"
        return {**out, **{name: Gap(name, why=why) for name in comparable}}
    truth = official.heldout_truth(task)  # looked up now: tests stand in for the answer key
    if not truth:
        why = "the held-out targets are not a CSV with the id and target columns under heldout/"
        return {**out, **{name: Gap(name, why=why) for name in comparable}}
    # ids as any program writes them ("3", "3.0", " 3" are one row), as evaluate.py reads them
    truth = {id_key(i): target for i, target in truth.items()}
    ids = list(truth)
    try:
        files = {"team": team, **comparable}
        values = {name: parse_predictions(task, data.decode("utf-8", errors="replace")) for name, data in files.items()}
    except (PartMissing, csv.Error) as exc:
        return {**out, **{name: Gap(name, why=f"a predictions file could not be read: {exc}") for name in comparable}}
    names = list(values)
    missing = [n for n in names if any(i not in values[n] for i in ids)]
    for name in missing:
        if name == "team":
            return {**out, **{n: Gap(n, why="the team's predictions miss held-out rows") for n in comparable}}
        out[name] = Gap(name, why="its predictions miss held-out rows")
    names = [n for n in names if n not in missing]
    matrix = _encode([[truth[i] for i in ids]] + [[values[n][i] for i in ids] for n in names])
    officials = {"team": team_official, **{n: baselines[n][1] for n in names if n != "team"}}
    higher = bool(team_official.get("higher_is_better", task.metric.higher_is_better))
    rng = np.random.default_rng(seed)
    metric = BATCHED.get(task.metric.name)
    resampled = ""
    per_series = _per_series(task, ids, truth, values, names, officials)
    team_row = matrix[1 + names.index("team")]
    copies = {name for k, name in enumerate(names) if name != "team" and np.array_equal(team_row, matrix[1 + k])}
    short = _too_few_units(task, per_series, len(ids))
    if short:  # a copy of the team's file is still known to be one
        return {**out, **{n: Gap(n, 0.0, 0.0, 0.0, len(ids), 0, "", "identical") if n in copies
                          else Gap(n, rows=len(ids), why=short) for n in names if n != "team"}}
    if per_series is not None:
        # a forecast is judged series by series: a resample draws whole series, never rows that
        # share one series' errors and its scale (those would make the interval far too narrow)
        scores = _bootstrap_means(per_series, RESAMPLES, rng)
        scorer = "evaluate.py --truth on each series alone (the official score is their mean)"
        resampled = f"{per_series.shape[1]} whole series"
    elif metric is not None and _agrees(metric, matrix, names, officials):
        scores = _bootstrap_in_process(metric, matrix, RESAMPLES, rng)
        scorer = f"the engine's {task.metric.name}, which reproduces evaluate.py's official values"
    elif supports_truth(task):
        scores = _bootstrap_with_evaluate(task, ids, truth, values, names, RESAMPLES_EVALUATE, rng)
        if scores is None:
            return {**out, **{n: Gap(n, why="evaluate.py could not score the resamples") for n in names if n != "team"}}
        scorer = "evaluate.py --truth"
    else:
        why = "evaluate.py does not take --truth, and the engine has no matching implementation of the metric"
        return {**out, **{n: Gap(n, why=why) for n in names if n != "team"}}
    sign = 1.0 if higher else -1.0
    team_scores = scores[names.index("team")]
    for k, name in enumerate(names):
        if name == "team":
            continue
        diffs = sign * (team_scores - scores[k])
        diffs = diffs[np.isfinite(diffs)]
        observed = sign * (team_official["value"] - officials[name]["value"])
        if name in copies:
            out[name] = Gap(name, 0.0, 0.0, 0.0, len(ids), len(team_scores), scorer, "identical", resampled=resampled)
            continue
        if len(diffs) < 10:
            out[name] = Gap(name, observed, rows=len(ids), why="too few resamples had a finite score")
            continue
        low, high = (float(x) for x in np.quantile(diffs, [(1 - LEVEL) / 2, (1 + LEVEL) / 2]))
        # An interval that clears zero by float noise alone (predictions that differ in their
        # last bits) is no lead: beyond zero means beyond the scores' own rounding.
        scale = max((abs(float(v)) for v in (team_official["value"], officials[name]["value"]) if math.isfinite(v)),
                    default=0.0)
        verdict = "better" if better(low, 0.0, True, scale) else \
            "worse" if better(high, 0.0, False, scale) else "within noise"
        out[name] = Gap(name, observed, low, high, len(ids), len(diffs), scorer, verdict, resampled=resampled)
    return out


def _distinct_resamples(units: int) -> int:
    """Draws of ``units`` units with replacement, as multisets: what a bootstrap can tell apart."""
    return math.comb(2 * units - 1, units)


def _too_few_units(task: Task, per_series: np.ndarray | None, rows: int) -> str:
    """Why no interval can be drawn honestly, or "" when one can. A forecast's rows share their
    series (its errors, its scale, the official score's mean over series): only whole series are
    independent units, so a forecast that cannot be drawn by series is not drawn by rows either."""
    if per_series is not None:
        units, what = per_series.shape[1], "series"
    elif task.assessment().name == "series":
        return ("a forecast's rows are not independent draws (they share their series), and its official "
                "score is not a mean over series that whole series could be drawn for")
    else:
        units, what = rows, "held-out rows"
    if units < MIN_UNITS:
        return (f"only {units} {what} to resample ({_distinct_resamples(units)} distinct resamples): "
                f"an interval needs at least {MIN_UNITS}")
    return ""


def _per_series(task: Task, ids: list[str], truth: dict[str, str], values: dict[str, dict[str, str]],
                names: list[str], officials: dict[str, dict]) -> np.ndarray | None:
    """Each compared file's official score on each series alone (files x series), scored by
    evaluate.py --truth, when the task's answer is a forecast of several series and its official
    score is the mean of those (checked on every file); else None (rows are resampled)."""
    assessment = task.assessment()
    if assessment.name != "series" or not supports_truth(task):
        return None
    extra, more = _truth_columns(task)
    if more is None:
        return None
    members: dict[str, list[str]] = {}
    for i in ids:
        members.setdefault(more[i][assessment.series_column], []).append(i)
    if len(members) < 2:
        return None
    results = _score_subsets(task, list(members.values()), truth, values, names, extra, more)
    if results is None or not all(x.get("ok") for x in results):
        return None
    scores = np.array([x["value"] for x in results], dtype=float).reshape(len(members), len(names)).T
    means = scores.mean(axis=1)
    if not all(math.isclose(float(m), float(officials[n]["value"]), rel_tol=1e-6, abs_tol=1e-9)
               for m, n in zip(means, names)):
        return None  # the official score is not the mean over series: a series bootstrap would not be its own
    return scores


def _truth_columns(task: Task) -> tuple[list[str], dict[str, dict[str, str]] | None]:
    """The columns a fold's truth carries beyond id and target (a series' name and time: the metric
    needs them), and their held-out values by id (None: unreadable)."""
    r = task.resources
    extra = [c for c in task.assessment().truth_columns() if c not in (r.id_column or "id", r.target or "")]
    more = official.heldout_columns(task, extra) if extra else {}
    return extra, None if more is None else {id_key(i): row for i, row in more.items()}


def _score_subsets(task: Task, subsets: list[list[str]], truth: dict[str, str], values: dict[str, dict[str, str]],
                   names: list[str], extra: list[str], more: dict[str, dict[str, str]]) -> list[dict] | None:
    """evaluate.py --truth on each subset of held-out ids (ids relabelled 0..n-1, as a validation
    fold is), every compared file on the same rows: results in (subset, file) order."""
    r = task.resources
    id_column, target = r.id_column or "id", r.target or ""
    with tempfile.TemporaryDirectory(prefix="trellis-gap-") as tmp:
        jobs = []
        for k, picked in enumerate(subsets):
            folder = Path(tmp) / f"{k:04d}"
            folder.mkdir()
            _write(folder / "truth.csv", id_column, target, [truth[i] for i in picked],
                   extra, [[more[i][c] for c in extra] for i in picked] if extra else None)
            for name in names:
                path = folder / name / r.predictions_file
                path.parent.mkdir()
                _write(path, id_column, target, [values[name][i] for i in picked])
                jobs.append(FoldJob(path, folder / "truth.csv"))
        results = evaluate_folds(task, jobs)
    return results if len(results) == len(jobs) else None


def _bootstrap_means(per_unit: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Each file's mean over ``resamples`` paired draws of its units with replacement: (files, resamples)."""
    idx = rng.integers(0, per_unit.shape[1], size=(resamples, per_unit.shape[1]))
    return np.stack([row[idx].mean(axis=1) for row in per_unit])


def _agrees(metric, matrix: np.ndarray, names: list[str], officials: dict[str, dict]) -> bool:
    """Does the engine's metric give evaluate.py's official value for every compared file?"""
    whole = metric(matrix[1:], np.broadcast_to(matrix[0], matrix[1:].shape))
    return all(math.isclose(float(v), float(officials[n]["value"]), rel_tol=1e-6, abs_tol=1e-9)
               for v, n in zip(whole, names))


def _bootstrap_in_process(metric, matrix: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Each compared file's metric on ``resamples`` paired resamples: shape (files, resamples)."""
    n = matrix.shape[1]
    block = max(1, _BLOCK // max(1, n))
    parts = []
    for start in range(0, resamples, block):
        idx = rng.integers(0, n, size=(min(block, resamples - start), n))
        truth = matrix[0][idx]
        parts.append(np.stack([metric(row[idx], truth) for row in matrix[1:]]))
    return np.concatenate(parts, axis=1)


def _bootstrap_with_evaluate(task: Task, ids: list[str], truth: dict[str, str], values: dict[str, dict[str, str]],
                             names: list[str], resamples: int, rng: np.random.Generator) -> np.ndarray | None:
    """The same, each resample written as a truth file and one predictions file per compared file
    and scored by evaluate.py --truth."""
    extra, more = _truth_columns(task)
    if more is None:
        return None
    n = len(ids)
    subsets = [[ids[i] for i in rng.integers(0, n, size=n)] for _ in range(resamples)]
    results = _score_subsets(task, subsets, truth, values, names, extra, more)
    if results is None:
        return None
    flat = np.array([x["value"] if x.get("ok") else np.nan for x in results], dtype=float)
    return flat.reshape(resamples, len(names)).T


def _write(path: Path, id_column: str, target: str, column: list[str], extra: list[str] | None = None,
           extra_values: list[list[str]] | None = None) -> None:
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow([id_column, target, *(extra or [])])
        if extra_values is None:
            w.writerows(enumerate(column))
        else:
            w.writerows([k, value, *more] for k, (value, more) in enumerate(zip(column, extra_values)))
