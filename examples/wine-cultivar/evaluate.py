"""Score a predictions file for the wine-cultivar task (accuracy).

Usage: python evaluate.py PREDICTIONS.csv [--truth TRUTH.csv]

Prints one JSON line {"metric", "value", "higher_is_better", "n"} and exits 0, or prints
the reason to stderr and exits 2 when the predictions (or the arguments) are malformed.
The labels are read from heldout/test_targets.csv next to this file, or from TRUTH.csv
when given (same columns: id, cultivar); Trellis scores its in-loop validation folds that way.
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
TARGET = "cultivar"
CLASSES = (1, 2, 3)  # the task's label set, fixed: a validation fold may hold only some of them
METRIC = "accuracy"
HIGHER_IS_BETTER = True
EXIT_MALFORMED = 2


class MalformedPredictions(Exception):
    pass


class MalformedTruth(Exception):
    pass


def _preview(values) -> str:
    values = sorted(values)
    shown = ", ".join(str(v) for v in values[:5])
    return shown + (f", ... ({len(values)} in all)" if len(values) > 5 else "")


def label_problem(values: pd.Series, ids: np.ndarray) -> str | None:
    """Why ``values`` are not all class labels from CLASSES, or None. Whole-number floats
    (2.0) count as labels; fractions, NaN, text and unknown classes do not."""
    numbers = pd.to_numeric(values, errors="coerce").to_numpy(dtype=float)
    bad = ~np.isfinite(numbers)
    if bad.any():
        return (f"{int(bad.sum())} label(s) in '{TARGET}' are missing, non-numeric, NaN or inf "
                f"(ids {_preview(ids[bad].tolist())})")
    fractional = numbers != np.round(numbers)
    if fractional.any():
        return (f"{int(fractional.sum())} label(s) in '{TARGET}' are not whole numbers, e.g. "
                f"{numbers[fractional][0]:g} (ids {_preview(ids[fractional].tolist())}); predict a class "
                f"label ({', '.join(map(str, CLASSES))}), not a regression output or a probability")
    unknown = ~np.isin(numbers, CLASSES)
    if unknown.any():
        return (f"unknown label(s) {_preview(set(numbers[unknown].astype(np.int64).tolist()))} in '{TARGET}' "
                f"(ids {_preview(ids[unknown].tolist())}); the classes are {', '.join(map(str, CLASSES))}")
    return None


def _integer_ids(frame: pd.DataFrame) -> pd.Series | None:
    ids = pd.to_numeric(frame[ID_COLUMN], errors="coerce")
    if ids.isna().any() or not np.all(np.mod(ids, 1) == 0):
        return None
    return ids.astype(np.int64)


def load_aligned_predictions(path: Path, truth: pd.DataFrame) -> np.ndarray:
    """Return predicted labels ordered like ``truth``; raise MalformedPredictions otherwise."""
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

    ids = _integer_ids(pred)
    if ids is None:
        raise MalformedPredictions(f"column '{ID_COLUMN}' must contain integer ids only")
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

    problem = label_problem(pred[TARGET], ids.to_numpy())
    if problem:
        raise MalformedPredictions(problem)
    labels = pd.to_numeric(pred[TARGET]).to_numpy(dtype=float).astype(np.int64)
    by_id = pd.Series(labels, index=ids.to_numpy())
    return by_id.loc[truth[ID_COLUMN].to_numpy()].to_numpy()


def load_truth(path: Path) -> pd.DataFrame:
    """The labels to score against: the id column (unique ints) and the label column (CLASSES)."""
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
    ids = _integer_ids(truth)
    if ids is None or ids.duplicated().any():
        raise MalformedTruth(f"truth file {path}: column '{ID_COLUMN}' must hold unique integer ids")
    problem = label_problem(truth[TARGET], ids.to_numpy())
    if problem:
        raise MalformedTruth(f"truth file {path}: {problem}")
    labels = pd.to_numeric(truth[TARGET]).to_numpy(dtype=float).astype(np.int64)
    return pd.DataFrame({ID_COLUMN: ids, TARGET: labels})


def accuracy(pred: np.ndarray, true: np.ndarray) -> float:
    """Fraction of exactly matching labels (1 is perfect)."""
    return float(np.mean(pred == true))


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="evaluate.py", description="Score predictions for the wine-cultivar task (accuracy).")
    parser.add_argument("predictions", type=Path, metavar="PREDICTIONS.csv", help="columns id,cultivar")
    parser.add_argument("--truth", type=Path, metavar="TRUTH.csv",
                        help="score against this file (columns id,cultivar) instead of the held-out labels")
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
    true = truth[TARGET].to_numpy()
    print(json.dumps({"metric": METRIC, "value": accuracy(pred, true),
                      "higher_is_better": HIGHER_IS_BETTER, "n": int(len(true))}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
