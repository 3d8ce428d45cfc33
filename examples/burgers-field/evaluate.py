"""Score a predictions file for the burgers-field task.

Usage: python evaluate.py PREDICTIONS.csv [--truth TRUTH.csv]

PREDICTIONS.csv has the columns id,u: one row for every query point of data/query_points.csv.
The targets are read from heldout/test_targets.csv next to this file, or from TRUTH.csv when
given (same columns: id, u). The metric is the relative L2 error over all scored points:

    relative_l2 = sqrt(sum_i (u_pred_i - u_true_i)^2) / sqrt(sum_i u_true_i^2)

Prints one JSON line {"metric", "value", "higher_is_better", "n"} (n: the number of points
scored) and exits 0, or prints the reason to stderr and exits 2 when the predictions (or the
arguments, or the truth file) are malformed: a missing column, missing, extra or duplicate ids,
the wrong number of rows, a value that is not a finite number.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
TARGETS_FILE = HERE / "heldout" / "test_targets.csv"
ID_COLUMN = "id"
TARGET = "u"
METRIC = "relative_l2"
HIGHER_IS_BETTER = False
EXIT_MALFORMED = 2


class MalformedPredictions(Exception):
    pass


class MalformedTruth(Exception):
    pass


def _preview(values) -> str:
    values = sorted(values)
    shown = ", ".join(str(v) for v in values[:5])
    return shown + (f", ... ({len(values)} in all)" if len(values) > 5 else "")


def load_aligned_predictions(path: Path, truth: pd.DataFrame) -> np.ndarray:
    """Return predictions ordered like ``truth``; raise MalformedPredictions otherwise."""
    if not path.is_file():
        raise MalformedPredictions(f"predictions file not found: {path}")
    try:
        pred = pd.read_csv(path)
    except Exception as exc:  # empty file, binary junk, ragged rows ...
        raise MalformedPredictions(f"could not parse {path} as CSV: {exc}") from exc
    missing_cols = [c for c in (ID_COLUMN, TARGET) if c not in pred.columns]
    if missing_cols:
        raise MalformedPredictions(
            f"missing column(s) {missing_cols}; expected columns {[ID_COLUMN, TARGET]}, "
            f"got {list(pred.columns)}")

    ids = pd.to_numeric(pred[ID_COLUMN], errors="coerce")
    if ids.isna().any() or not np.all(np.mod(ids, 1) == 0):
        raise MalformedPredictions(f"column '{ID_COLUMN}' must contain integer ids only")
    ids = ids.astype(np.int64)
    duplicated = set(ids[ids.duplicated()])
    if duplicated:
        raise MalformedPredictions(f"duplicate ids: {_preview(duplicated)}")
    expected = set(truth[ID_COLUMN])
    missing_ids, extra_ids = expected - set(ids), set(ids) - expected
    if missing_ids:
        raise MalformedPredictions(f"missing ids: {_preview(missing_ids)}")
    if extra_ids:
        raise MalformedPredictions(f"unexpected ids: {_preview(extra_ids)}")
    if len(pred) != len(truth):
        raise MalformedPredictions(f"expected {len(truth)} rows, got {len(pred)}")

    values = pd.to_numeric(pred[TARGET], errors="coerce").to_numpy(dtype=float)
    bad = ~np.isfinite(values)
    if bad.any():
        raise MalformedPredictions(
            f"{int(bad.sum())} prediction(s) in '{TARGET}' are missing, non-numeric, NaN or inf "
            f"(ids {_preview(ids[bad].tolist())})")
    by_id = pd.Series(values, index=ids.to_numpy())
    return by_id.loc[truth[ID_COLUMN].to_numpy()].to_numpy()


def load_truth(path: Path) -> pd.DataFrame:
    """The points to score: unique integer ids and finite values of u, not all zero."""
    if not path.is_file():
        raise MalformedTruth(f"truth file not found: {path}")
    try:
        truth = pd.read_csv(path)
    except Exception as exc:
        raise MalformedTruth(f"could not parse truth file {path} as CSV: {exc}") from exc
    missing_cols = [c for c in (ID_COLUMN, TARGET) if c not in truth.columns]
    if missing_cols:
        raise MalformedTruth(f"truth file {path} lacks column(s) {missing_cols}; expected {[ID_COLUMN, TARGET]}")
    if truth.empty:
        raise MalformedTruth(f"truth file {path} has no rows")
    ids = pd.to_numeric(truth[ID_COLUMN], errors="coerce")
    if ids.isna().any() or not np.all(np.mod(ids, 1) == 0) or ids.duplicated().any():
        raise MalformedTruth(f"truth file {path}: column '{ID_COLUMN}' must hold unique integer ids")
    values = pd.to_numeric(truth[TARGET], errors="coerce").to_numpy(dtype=float)
    if not np.all(np.isfinite(values)):
        raise MalformedTruth(f"truth file {path}: column '{TARGET}' must hold finite numbers")
    if not np.any(values != 0):
        raise MalformedTruth(f"truth file {path}: every '{TARGET}' is 0, so the relative error is undefined")
    return pd.DataFrame({ID_COLUMN: ids.astype(np.int64), TARGET: values})


def relative_l2(pred: np.ndarray, true: np.ndarray) -> float:
    return float(np.linalg.norm(pred - true) / np.linalg.norm(true))


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="evaluate.py",
        description="Score predictions for the burgers-field task (relative L2 error over the query points).")
    parser.add_argument("predictions", type=Path, metavar="PREDICTIONS.csv", help="columns id,u")
    parser.add_argument("--truth", type=Path, metavar="TRUTH.csv",
                        help="score against this file (columns id,u) instead of the held-out targets")
    return parser.parse_args(argv)  # bad arguments: usage on stderr, exit 2


def main(argv: list[str]) -> int:
    args = parse_args(argv[1:])
    try:
        truth = load_truth(args.truth or TARGETS_FILE)
        pred = load_aligned_predictions(args.predictions, truth)
    except MalformedTruth as exc:
        print(f"evaluate.py: {exc}", file=sys.stderr)
        return EXIT_MALFORMED
    except MalformedPredictions as exc:
        print(f"evaluate.py: malformed predictions: {exc}", file=sys.stderr)
        return EXIT_MALFORMED
    print(json.dumps({"metric": METRIC, "value": relative_l2(pred, truth[TARGET].to_numpy()),
                      "higher_is_better": HIGHER_IS_BETTER, "n": int(len(truth))}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
