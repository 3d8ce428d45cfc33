"""Score a parameters file for the epidemic-sir task.

Usage: python evaluate.py PARAMETERS.csv

PARAMETERS.csv has the columns parameter,value and one row for each of beta and gamma. The score is
the mean relative error of the estimates against the true rates, read from
heldout/true_parameters.csv next to this file (columns parameter,value):

    mean_relative_error = mean over p in (beta, gamma) of |estimate_p - true_p| / true_p

Prints one JSON line {"metric", "value", "higher_is_better", "n"} (n: the number of parameters
scored) and exits 0, or prints the reason to stderr and exits 2 when the file is malformed (a
missing column, a missing, duplicate or unknown parameter, a value that is not a finite number).

There is no --truth mode: the answer is a table of parameters, not rows, so Trellis validates a
program in-loop by how well its reproduction.csv reproduces held-out training rows, and this
script only ever scores the official answer.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
TRUTH_FILE = HERE / "heldout" / "true_parameters.csv"
NAMES = ("beta", "gamma")
COLUMNS = ("parameter", "value")
METRIC = "mean_relative_error"
HIGHER_IS_BETTER = False
EXIT_MALFORMED = 2


class Malformed(Exception):
    pass


def read_table(path: Path, what: str) -> dict[str, float]:
    """{parameter: value} from a parameter,value CSV, refusing anything ambiguous."""
    if not path.is_file():
        raise Malformed(f"{what} file not found: {path}")
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            header = [c.strip() for c in (reader.fieldnames or [])]
            rows = list(reader)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise Malformed(f"could not read {what} file {path} as CSV: {exc}") from exc
    missing_cols = [c for c in COLUMNS if c not in header]
    if missing_cols:
        raise Malformed(f"missing column(s) {missing_cols} in {path.name}; expected columns {list(COLUMNS)}")
    values: dict[str, float] = {}
    for row in rows:
        row = {(k or "").strip(): v for k, v in row.items()}
        name = (row.get("parameter") or "").strip()
        text = (row.get("value") or "").strip()
        if name in values:
            raise Malformed(f"duplicate parameter {name!r}")
        if not text:
            raise Malformed(f"parameter {name!r} has no value")
        try:
            value = float(text)
        except ValueError:
            raise Malformed(f"parameter {name!r} has value {text[:30]!r}: non-numeric") from None
        if not math.isfinite(value):
            raise Malformed(f"parameter {name!r} is NaN or inf")
        values[name] = value
    unknown = sorted(n for n in values if n not in NAMES)
    if unknown:
        raise Malformed(f"unknown parameter(s) {unknown}; expected exactly {list(NAMES)}")
    missing = [n for n in NAMES if n not in values]
    if missing:
        raise Malformed(f"missing parameter(s) {missing}; expected exactly {list(NAMES)}")
    return values


def mean_relative_error(estimate: dict[str, float], truth: dict[str, float]) -> float:
    return sum(abs(estimate[n] - truth[n]) / abs(truth[n]) for n in NAMES) / len(NAMES)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="evaluate.py",
        description="Score the estimated rates beta, gamma for the epidemic-sir task (mean relative error).")
    parser.add_argument("parameters", type=Path, metavar="PARAMETERS.csv", help="columns parameter,value")
    args = parser.parse_args(argv[1:])  # bad arguments (--truth included): usage on stderr, exit 2
    try:
        truth = read_table(TRUTH_FILE, "truth")
    except Malformed as exc:
        print(f"evaluate.py: the answer key is unusable: {exc}", file=sys.stderr)
        return EXIT_MALFORMED
    try:
        estimate = read_table(args.parameters, "parameters")
    except Malformed as exc:
        print(f"evaluate.py: malformed parameters: {exc}", file=sys.stderr)
        return EXIT_MALFORMED
    print(json.dumps({"metric": METRIC, "value": mean_relative_error(estimate, truth),
                      "higher_is_better": HIGHER_IS_BETTER, "n": len(NAMES)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
