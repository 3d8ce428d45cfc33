"""Score a predictions file for the river-flow-forecast task.

Usage: python evaluate.py PREDICTIONS.csv [--truth TRUTH.csv]

Prints one JSON line {"metric", "value", "higher_is_better", "n"} and exits 0, or prints
the reason to stderr and exits 2 when the predictions (or the arguments) are malformed.
The targets are read from heldout/test_targets.csv next to this file, or from TRUTH.csv
when given (same columns: id, flow, station, week); Trellis scores its in-loop validation folds
that way.

The metric is MASE averaged over stations: each station's mean absolute error over its scored
weeks, divided by the mean absolute one-step change of its flow in data/train.csv (next to
this file) over the weeks before its first scored week. Dividing by a station's own week-to-week
variability makes a brook and a large river count the same, and a value below 1 means the
forecast errs less than a one-week-ahead persistence forecast did in the past.
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
HISTORY_FILE = HERE / "data" / "train.csv"
ID_COLUMN = "id"
TARGET = "flow"
SERIES = "station"
TIME = "week"
METRIC = "mase"
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
    """The rows to score: unique integer ids, finite flows, and each row's station and week."""
    if not path.is_file():
        raise MalformedTruth(f"truth file not found: {path}")
    try:
        truth = pd.read_csv(path)
    except Exception as exc:
        raise MalformedTruth(f"could not parse truth file {path} as CSV: {exc}") from exc
    needed = [ID_COLUMN, TARGET, SERIES, TIME]
    missing_cols = [c for c in needed if c not in truth.columns]
    if missing_cols:
        raise MalformedTruth(f"truth file {path} lacks column(s) {missing_cols}; expected {needed} "
                             f"(MASE is computed per {SERIES}, against its history before the scored {TIME}s)")
    if truth.empty:
        raise MalformedTruth(f"truth file {path} has no rows")
    ids = pd.to_numeric(truth[ID_COLUMN], errors="coerce")
    if ids.isna().any() or not np.all(np.mod(ids, 1) == 0) or ids.duplicated().any():
        raise MalformedTruth(f"truth file {path}: column '{ID_COLUMN}' must hold unique integer ids")
    values = pd.to_numeric(truth[TARGET], errors="coerce")
    if not np.all(np.isfinite(values)):
        raise MalformedTruth(f"truth file {path}: column '{TARGET}' must hold finite numbers")
    weeks = pd.to_numeric(truth[TIME], errors="coerce")
    if not np.all(np.isfinite(weeks)):
        raise MalformedTruth(f"truth file {path}: column '{TIME}' must hold numbers")
    return pd.DataFrame({ID_COLUMN: ids.astype(np.int64), TARGET: values.astype(float),
                         SERIES: truth[SERIES], TIME: weeks.astype(float)})


def load_history(path: Path = HISTORY_FILE) -> pd.DataFrame:
    try:
        history = pd.read_csv(path)
    except Exception as exc:
        raise MalformedTruth(f"could not read the training history {path}: {exc}") from exc
    missing_cols = [c for c in (SERIES, TIME, TARGET) if c not in history.columns]
    if missing_cols:
        raise MalformedTruth(f"training history {path} lacks column(s) {missing_cols}")
    return history


def station_scale(history: pd.DataFrame, station, first_week: float) -> float:
    """Mean absolute one-step change of a station's flow over its weeks before ``first_week``:
    what a forecaster scored from that week on could have known. A truth that scores a station
    from the start of its record (fewer than two earlier weeks) falls back on the station's whole
    training record, so that the scale is still that station's own variability."""
    rows = history[history[SERIES] == station].sort_values(TIME)
    before = rows[rows[TIME] < first_week]
    if len(before) < 2:
        before = rows
    flows = pd.to_numeric(before[TARGET], errors="coerce").to_numpy(dtype=float)
    flows = flows[np.isfinite(flows)]
    if len(flows) < 2:
        raise MalformedTruth(f"{SERIES} {station!r} has fewer than two weeks of history in {HISTORY_FILE.name}, "
                             "so its errors cannot be scaled")
    scale = float(np.mean(np.abs(np.diff(flows))))
    if not scale > 0:
        raise MalformedTruth(f"{SERIES} {station!r}: its flow never changes in {HISTORY_FILE.name}, "
                             "so its errors cannot be scaled")
    return scale


def mase(pred: np.ndarray, truth: pd.DataFrame, history: pd.DataFrame) -> float:
    """Mean over stations of (station MAE on its scored weeks) / (its in-sample one-step MAE)."""
    errors = np.abs(pred - truth[TARGET].to_numpy(dtype=float))
    ratios = []
    # Station labels are compared as read by pandas in both files (integers here).
    for station, rows in truth.groupby(SERIES, sort=True):
        scale = station_scale(history, station, float(rows[TIME].min()))
        ratios.append(float(np.mean(errors[rows.index.to_numpy()])) / scale)
    return float(np.mean(ratios))


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="evaluate.py",
        description="Score predictions for the river-flow-forecast task (MASE averaged over stations).")
    parser.add_argument("predictions", type=Path, metavar="PREDICTIONS.csv", help="columns id,flow")
    parser.add_argument("--truth", type=Path, metavar="TRUTH.csv",
                        help="score against this file (columns id,flow,station,week) instead of the held-out targets")
    return parser.parse_args(argv)  # bad arguments: usage on stderr, exit 2


def main(argv: list[str]) -> int:
    args = parse_args(argv[1:])
    try:
        truth = load_truth(args.truth or TARGETS_FILE)
        pred = load_aligned_predictions(args.predictions, truth)
        value = mase(pred, truth, load_history())
    except MalformedTruth as exc:
        print(f"evaluate.py: {exc}", file=sys.stderr)
        return EXIT_MALFORMED
    except MalformedPredictions as exc:
        print(f"evaluate.py: malformed predictions: {exc}", file=sys.stderr)
        return EXIT_MALFORMED
    print(json.dumps({"metric": METRIC, "value": value,
                      "higher_is_better": HIGHER_IS_BETTER, "n": int(len(truth))}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
