"""In-loop validation: score a candidate program without touching the held-out data.

The training file is split (seeded) into a fit part and a validation part. The program runs
with the same contract as always — it reads `train` and `test_features` and writes
predictions — but `train` is the fit part and `test_features` holds the validation rows (with
exactly the test file's columns), so its predictions can be scored against targets the engine
kept back. The task's own evaluate.py scores each fold (`--truth`), so the in-loop metric is
the official one, whatever its name; the held-out answer key is never read here.

The split mirrors the question the official test asks (its answer kind's ``Assessment.plan``): a task declares it
in Data_config.json (`validation`), and when it declares nothing and its test inputs lie
beyond the training range, Trellis validates on the edge of that range (extrapolation) instead
of on random folds, which measure interpolation and rank extrapolating models wrongly.
"""
from __future__ import annotations

import csv
import io
import math
import random
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .baselines import predict
from .evaluation import FoldJob, evaluate_folds, supports_truth
from .metrics import metric_fn
from .sandbox import ExecutionResult, UnsafeOutput

if TYPE_CHECKING:  # a task holds its assessment (engine/task.py): the type only, never the module
    from .task import Task

SPLITS = ("kfold", "holdout_range", "group", "time")
DEFAULT_FOLDS = {"kfold": 5, "holdout_range": 3, "group": 5, "time": 3}
# Trellis validates on the edge of an input's range when at least this share of the test rows
# lies beyond the training range on one side of that input. Fewer is sampling, not a question
# about extrapolation: a random split of 178 rows left up to 6 % of its test rows outside.
EXTRAPOLATION_SHARE = 0.2
MIN_FIT_SHARE = 0.3  # a fold never fits on less than this share of the training rows


@dataclass(frozen=True)
class SplitPlan:
    """How in-loop validation splits the training rows, and why."""

    split: str                   # kfold | holdout_range | group | time | series | residual (an answer kind's own)
    folds: int
    column: str | None = None    # the input a range, group or time split is made on
    side: str | None = None      # holdout_range: "upper" or "lower" end of the column
    fraction: float = 0.2        # holdout_range: share of rows in each validation band
    chosen_by: str = "default"   # "task" (Data_config.json) | "trellis" (test beyond training range) | "default"
    reason: str = ""

    def to_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        if self.split == "holdout_range":
            how = (f"extrapolation split: validate on the {'top' if self.side == 'upper' else 'bottom'} "
                   f"{self.fraction:.0%} of `{self.column}`, fit on the rest ({self.folds} bands)")
        elif self.split == "group":
            how = f"group split on `{self.column}`: whole groups held out ({self.folds} folds)"
        elif self.split == "residual":
            how = (f"the stated law's residual on the answer" + (f", with {self.folds}-fold held-out observations"
                                                                  if self.folds > 1 else ""))
        elif self.split == "series":
            how = (f"series split on `{self.column}`: each series' last steps before a cut validate, every "
                   f"series' history before it fits ({self.folds} cuts)")
        elif self.split == "time":
            how = f"time split on `{self.column}`: fit on the past, validate on what follows ({self.folds} folds)"
        else:
            how = f"{self.folds}-fold cross-validation on shuffled rows"
        return f"{how}; {self.reason}" if self.reason else how


@dataclass(frozen=True)
class ValidationSplit:
    files: dict[str, Path]          # relative path in the sandbox -> host file
    truth: Path                     # id and target of the validation rows, for evaluate.py --truth
    targets: dict[str, str]         # validation id -> true target, as written in the training file
    n_fit: int
    n_validation: int


# --- reading the task's data -----------------------------------------------------------------
@dataclass(frozen=True)
class _Data:
    header: list[str]
    rows: list[dict[str, str]]
    test_header: list[str]
    test_rows: list[dict[str, str]]


def _read_csv(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        rows = list(reader)
        return list(reader.fieldnames or []), rows


def read_data(task: Task) -> _Data:
    r = task.resources
    if not (r.target and r.id_column and "train" in r.files and "test_features" in r.files):
        raise ValueError("in-loop validation needs Data_config.json with train, test_features, target and id_column")
    header, rows = _read_csv(task.folder / r.files["train"])
    test_header, test_rows = _read_csv(task.folder / r.files["test_features"])
    if not rows:
        raise ValueError(f"{r.files['train']} has no rows to validate on")
    return _Data(header, rows, test_header, test_rows)


def _numbers(rows: list[dict[str, str]], column: str) -> list[float] | None:
    try:
        values = [float(row[column]) for row in rows]
    except (KeyError, TypeError, ValueError):
        return None
    return values if all(math.isfinite(v) for v in values) else None


def validation_columns(task: Task, data: _Data) -> list[str]:
    """The columns the program sees in the validation features file: the test file's own
    (never a column only the training file has, which the real test would not give it)."""
    r = task.resources
    return [c for c in data.test_header if c != r.id_column and c in data.header and c != r.target]


# --- planning the split ------------------------------------------------------------------------
def row_plan(task: Task) -> SplitPlan:
    """One prediction per row: the split the task declares, or the one its data calls for."""
    declared = getattr(task.resources, "validation", None)
    data = read_data(task)
    if declared:
        return _declared_plan(task, declared, data)
    beyond = _extrapolation(task, data)
    if beyond:
        return beyond
    return SplitPlan("kfold", DEFAULT_FOLDS["kfold"], chosen_by="default",
                     reason="the test inputs lie within the training range")


def _field(declared, name: str, default=None):
    return declared.get(name, default) if isinstance(declared, dict) else getattr(declared, name, default)


def _declared_plan(task: Task, declared, data: _Data) -> SplitPlan:
    split = _field(declared, "split", "kfold")
    if split not in SPLITS:
        raise ValueError(f"Data_config.json validation.split {split!r} is not one of {', '.join(SPLITS)}")
    column = _field(declared, "column")
    if split != "kfold":
        if not column or column not in data.header:
            raise ValueError(f"Data_config.json validation.column {column!r} is not a column of "
                             f"{task.resources.files['train']}")
        if split in {"holdout_range", "time"} and _numbers(data.rows, column) is None:
            raise ValueError(f"Data_config.json validation.column {column!r} must be numeric for a {split} split")
    fraction = float(_field(declared, "fraction") or 0.2)
    folds = int(_field(declared, "folds") or DEFAULT_FOLDS[split])
    if split == "holdout_range":
        folds = min(folds, range_bands(fraction))
    return SplitPlan(split, folds, column=column,
                     side=(_field(declared, "side") or "upper") if split == "holdout_range" else None,
                     fraction=fraction, chosen_by="task", reason="declared in Data_config.json")


def range_bands(fraction: float) -> int:
    """How many validation bands of ``fraction`` fit while every fold still fits on at least
    MIN_FIT_SHARE of the rows."""
    return max(1, int((1 - MIN_FIT_SHARE) / fraction + 1e-9))


def _extrapolation(task: Task, data: _Data) -> SplitPlan | None:
    """An extrapolation split when many test rows lie beyond the training range of an input."""
    if not data.test_rows:
        return None
    best: tuple[float, str, str, int, float] | None = None
    for column in validation_columns(task, data):
        train, test = _numbers(data.rows, column), _numbers(data.test_rows, column)
        if not train or not test:
            continue
        lo, hi = min(train), max(train)
        above, below = sum(v > hi for v in test), sum(v < lo for v in test)
        side, count, edge = ("upper", above, hi) if above >= below else ("lower", below, lo)
        share = count / len(test)
        if share >= EXTRAPOLATION_SHARE and (best is None or share > best[0]):
            best = (share, column, side, count, edge)
    if best is None:
        return None
    share, column, side, count, edge = best
    where = "above the training maximum" if side == "upper" else "below the training minimum"
    reason = (f"{count} of {len(data.test_rows)} test rows ({share:.0%}) have `{column}` {where} {edge:.6g}, "
              "so the official test asks for extrapolation")
    return SplitPlan("holdout_range", min(DEFAULT_FOLDS["holdout_range"], range_bands(0.2)), column=column,
                     side=side, fraction=0.2,
                     chosen_by="trellis", reason=reason)


# --- folds -------------------------------------------------------------------------------------
def row_folds(task: Task, plan: SplitPlan, data: _Data, seed: int) -> list[tuple[list[int], list[int]]]:
    """(fit row indices, validation row indices) for each fold of a per-row ``plan``."""
    n = len(data.rows)
    if plan.split == "holdout_range":
        return _range_folds(data, plan, n)
    if plan.split == "time":
        return _time_folds(data, plan, n)
    if plan.split == "group":
        return _group_folds(data, plan, n, seed)
    return _kfold(task, data, plan.folds, n, seed)


def _order_by(data: _Data, column: str) -> list[int]:
    values = _numbers(data.rows, column) or [0.0] * len(data.rows)
    return sorted(range(len(values)), key=lambda i: (values[i], i))


def _tie_free(values: list[float], order: list[int], cut: int) -> int:
    """The cut nearest ``cut`` in ``order`` (sorted by ``values``) that does not part rows with
    the same value: rows measured at one time, or at one value of a range, sit on one side (a
    fold that fits on half of them and validates on the other half leaks the answer)."""
    n = len(order)
    if cut <= 0 or cut >= n:
        return cut

    def clean(p: int) -> bool:
        return 0 < p < n and values[order[p - 1]] != values[order[p]]

    for step in range(n):
        for p in (cut - step, cut + step):
            if clean(p):
                return p
    return cut


def _range_folds(data: _Data, plan: SplitPlan, n: int) -> list[tuple[list[int], list[int]]]:
    """Band k (k = 0 is the very edge) validates; everything on the inner side of it fits.
    Later bands fit on less data, as extrapolating from further inside does."""
    order = _order_by(data, plan.column or "")
    values = _numbers(data.rows, plan.column or "") or [float(i) for i in range(n)]
    if plan.side == "lower":
        order.reverse()
    band = max(1, round(plan.fraction * n))
    folds = []
    end = n
    for k in range(max(1, plan.folds)):
        start = n - (k + 1) * band
        if start < max(2, MIN_FIT_SHARE * n) and folds:
            break
        start = _tie_free(values, order, max(start, 1))
        if start <= 0 or start >= end:
            break
        folds.append((sorted(order[:start]), sorted(order[start:end])))
        end = start
    return folds


def _time_folds(data: _Data, plan: SplitPlan, n: int) -> list[tuple[list[int], list[int]]]:
    order = _order_by(data, plan.column or "")
    values = _numbers(data.rows, plan.column or "") or [float(i) for i in range(n)]
    blocks = max(2, plan.folds + 1)
    edges = [0, *(_tie_free(values, order, round(i * n / blocks)) for i in range(1, blocks)), n]
    return [(sorted(order[:edges[k + 1]]), sorted(order[edges[k + 1]:edges[k + 2]]))
            for k in range(blocks - 1) if edges[k + 2] > edges[k + 1] and edges[k + 1] > 0]


def _group_folds(data: _Data, plan: SplitPlan, n: int, seed: int) -> list[tuple[list[int], list[int]]]:
    """Whole groups per fold, balanced by size (the largest group goes to the lightest fold)."""
    groups: dict[str, list[int]] = {}
    for i, row in enumerate(data.rows):
        groups.setdefault(row.get(plan.column or "", ""), []).append(i)
    if len(groups) < 2:
        raise ValueError(f"a group split needs at least two groups in `{plan.column}`; it has {len(groups)}")
    names = sorted(groups)
    random.Random(seed).shuffle(names)
    names.sort(key=lambda g: -len(groups[g]))  # stable: shuffled order breaks ties
    k = min(plan.folds, len(groups))
    members: list[list[int]] = [[] for _ in range(k)]
    for g in names:
        min(members, key=len).extend(groups[g])
    everyone = set(range(n))
    return [(sorted(everyone - set(m)), sorted(m)) for m in members if m]


def _kfold(task: Task, data: _Data, folds: int, n: int, seed: int) -> list[tuple[list[int], list[int]]]:
    pinned = _jump_neighbours(data.rows, validation_columns(task, data), task.resources.target or "")
    order = [i for i in range(n) if i not in pinned]
    random.Random(seed).shuffle(order)
    everyone = set(range(n))
    return [(sorted(everyone - set(order[k::folds])), sorted(order[k::folds])) for k in range(folds)
            if order[k::folds]]


def _jump_neighbours(rows: list[dict], features: list[str], target: str, factor: float = 10.0) -> set[int]:
    """For one-feature data: the samples on either side of a jump in the target stay in the
    fit part. Holding one out removes the only evidence of where the jump is, and then its
    single error swamps the whole validation score, whatever the method (measured: it made
    validation rank a constant-per-side fit worse than a polynomial)."""
    if len(features) != 1 or len(rows) < 5:
        return set()
    try:
        pts = sorted((float(row[features[0]]), float(row[target]), i) for i, row in enumerate(rows))
    except (KeyError, ValueError):
        return set()
    steps = [abs(b[1] - a[1]) for a, b in zip(pts, pts[1:])]
    typical = sorted(steps)[len(steps) // 2] or 1e-12
    pinned: set[int] = set()
    for k, step in enumerate(steps):
        if step > factor * typical:
            pinned |= {pts[k][2], pts[k + 1][2]}
    return pinned


def input_columns(task: Task) -> list[str]:
    """The inputs a program is given for each row (the test file's columns, id and target aside)."""
    return validation_columns(task, read_data(task))


def plan_from_dict(d: dict) -> SplitPlan:
    """A SplitPlan from its ``to_dict()`` (as a validation metric carries it)."""
    known = {k: d[k] for k in SplitPlan.__dataclass_fields__ if k in d}
    return SplitPlan(**known)


# --- one fold's files --------------------------------------------------------------------------
def write_rows_fold(task: Task, data: _Data, workdir: Path, fit_idx: list[int], val_idx: list[int],
                    truth_columns: list[str] | None = None) -> ValidationSplit:
    """A fold's files: the fit rows as the training file, the validation rows' inputs (numbered
    0..n-1) as the test features file, and the truth with ``truth_columns`` (id, target, and
    whatever else the metric needs: a series column, a time)."""
    r = task.resources
    columns = validation_columns(task, data)
    workdir.mkdir(parents=True, exist_ok=True)
    fit_path, val_path, truth_path = workdir / "fit.csv", workdir / "validation_features.csv", workdir / "truth.csv"
    with fit_path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=data.header)
        w.writeheader()
        w.writerows(data.rows[i] for i in fit_idx)
    targets = {str(k): data.rows[i][r.target] for k, i in enumerate(val_idx)}
    with val_path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow([r.id_column, *columns])
        for k, i in enumerate(val_idx):
            w.writerow([k, *(data.rows[i][c] for c in columns)])
    extra = [c for c in (truth_columns or []) if c not in (r.id_column, r.target)]
    missing = [c for c in extra if c not in data.header]
    if missing:
        raise ValueError(f"the fold truth needs column(s) {', '.join(missing)}, which {r.files['train']} lacks")
    with truth_path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow([r.id_column, r.target, *extra])
        for k, i in enumerate(val_idx):
            w.writerow([k, data.rows[i][r.target], *(data.rows[i][c] for c in extra)])
    # every other file the task gives a program (a law, a mesh, a dictionary) is the same on a fold
    others = {rel: path for rel, path in task.input_files().items()
              if rel not in (r.files["train"], r.files["test_features"])}
    return ValidationSplit({**others, r.files["train"]: fit_path, r.files["test_features"]: val_path}, truth_path,
                           targets, len(fit_idx), len(val_idx))


# --- scoring -----------------------------------------------------------------------------------
def score_predictions(task: Task, split: ValidationSplit, predictions_csv: bytes) -> dict:
    """The task's metric on one fold, computed by the engine: the fallback for an evaluate.py
    that does not take ``--truth`` yet (README, 'Task folders')."""
    r = task.resources
    try:
        fn = metric_fn(task.metric.name)
    except KeyError as exc:
        return {"ok": False, "error": f"{exc.args[0]}; make evaluate.py accept --truth (README, 'Task folders') "
                "so that Trellis scores validation folds with it"}
    try:
        rows = list(csv.DictReader(io.StringIO(predictions_csv.decode("utf-8"))))
        by_id = {str(int(float(row[r.id_column]))): row[r.target] for row in rows}
    except (KeyError, ValueError, TypeError, UnicodeDecodeError) as exc:
        return {"ok": False, "error": f"validation predictions unreadable: {exc}"}
    missing = [i for i in split.targets if i not in by_id]
    if missing:
        return {"ok": False, "error": f"validation predictions miss {len(missing)} of {len(split.targets)} ids"}
    ids = list(split.targets)
    try:
        pred = [float(by_id[i]) for i in ids]
        true = [float(split.targets[i]) for i in ids]
    except ValueError as exc:
        return {"ok": False, "error": f"validation predictions are not numbers: {exc}"}
    try:
        value = fn(pred, true)
    except (OverflowError, ZeroDivisionError):  # float ** 2 raises at 1e308 instead of giving inf
        value = math.inf
    if not math.isfinite(value):  # predictions of 1e308 square to inf: a failed score, never a passing one
        return {"ok": False, "error": f"validation predictions score {value} (not a finite number): they overflow "
                                      f"{task.metric.name}"}
    return {"ok": True, "metric": task.metric.name, "value": value,
            "higher_is_better": task.metric.higher_is_better, "n": len(ids), "scorer": "built-in"}


def summarize_folds(task: Task, plan: SplitPlan, scores: list[dict], n_folds: int, names: list[str]) -> dict:
    """One validation result from the program's fold scores (the first ``n_folds``) and each
    baseline's (``n_folds`` each, in ``names`` order)."""
    own, rest = scores[:n_folds], scores[n_folds:]
    failed = next((s for s in own if not s.get("ok")), None)
    if failed:
        return {**failed, "validation": plan.to_dict()}
    values = [float(s["value"]) for s in own]
    first = own[0]
    baselines, per_fold = {}, {}
    for i, name in enumerate(names):
        mine = rest[i * n_folds:(i + 1) * n_folds]
        if mine and all(s.get("ok") for s in mine):
            baselines[name] = round(sum(float(s["value"]) for s in mine) / len(mine), 6)
            # per fold too, so "the baseline beats the program" is judged against the folds' noise
            per_fold[name] = [round(float(s["value"]), 6) for s in mine]
    return {"ok": True, "metric": first.get("metric", task.metric.name), "value": sum(values) / len(values),
            "higher_is_better": bool(first.get("higher_is_better", task.metric.higher_is_better)),
            "n": sum(int(s.get("n") or 0) for s in own), "split": "validation", "splits": len(values),
            "split_values": [round(v, 6) for v in values], "scorer": first.get("scorer", "evaluate.py"),
            "baselines": baselines, "baseline_split_values": per_fold, "validation": plan.to_dict()}


def row_fold_baselines(task: Task, data: _Data, fit_idx: list[int], val_idx: list[int]) -> dict[str, bytes]:
    """engine/baselines.py's predictors fitted on a fold's fit rows, predicting its validation
    rows (numbered as the program's validation file numbers them)."""
    r = task.resources
    columns = validation_columns(task, data)
    test = [{r.id_column: str(k), **{c: data.rows[i][c] for c in columns}} for k, i in enumerate(val_idx)]
    try:
        return predict(task, [data.rows[i] for i in fit_idx], test)
    except (KeyError, ValueError, IndexError):
        return {}


def read_answer(task: Task, result: ExecutionResult, name: str | None = None) -> tuple[bytes, str]:
    """The file a fold's program wrote to be scored (default: the predictions), or why there is none."""
    name = name or task.resources.predictions_file
    if not result.ok:
        return b"", f"program {result.status} on the validation split"
    try:
        return result.read_file(name), ""
    except FileNotFoundError:
        return b"", f"program wrote no {name} on the validation split"
    except UnsafeOutput as exc:
        return b"", f"predictions refused: {exc}"


def score_folds(task: Task, splits: list[ValidationSplit], predictions: list[Path]) -> list[dict]:
    """Each answer scored against its fold's truth: by evaluate.py --truth, all in one process."""
    if supports_truth(task):
        scored = evaluate_folds(task, [FoldJob(p, s.truth) for p, s in zip(predictions, splits)])
        return [{**s, "scorer": "evaluate.py"} if s.get("ok") else
                {**s, "error": f"validation fold {k + 1}: {s.get('error')}"} for k, s in enumerate(scored)]
    return [score_predictions(task, s, p.read_bytes()) for s, p in zip(splits, predictions)]
