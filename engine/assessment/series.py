"""Forecasts of several series in long format (Data_config.json ``"answer": {"kind": "series", ...}``).

The training file holds each series' history, one row per (series, time); the test file asks
for the steps after each series' last training time, one row each; the answer is one
prediction per test row, scored per series by evaluate.py (MASE, a per-series mean, ...).
What differs from one prediction per row:
- folds cut each series in time: fold k validates the k-th block of ``horizon`` steps from the
  end of each series and fits on everything of every series before its block (never a later
  step of any series, which a forecaster would not have);
- a fold's truth carries the series and time columns, so a per-series metric can be computed;
- the trivial baselines are per series: the last value (persistence) and the series' mean.
"""
from __future__ import annotations

import csv
import io
import math
import re
from collections import defaultdict
from statistics import median
from typing import ClassVar

from .. import validation
from ..prompt_format import named
from ..task_kind import CLASSIFICATION
from ..validation import SplitPlan
from .base import Assessment

DEFAULT_FOLDS = 3
_FORECAST = re.compile(r"^- answer: a forecast of each series in `([^`]+)`: the (\d+) step\(s\) of `([^`]+)`", re.M)
MIN_HISTORY = 3  # a fold keeps at least this many steps of a series to fit on


class SeriesAssessment(Assessment):
    name: ClassVar[str] = "series"
    title: ClassVar[str] = "forecasts of several series"
    options_help: ClassVar[dict[str, str]] = {
        "series": "the column naming each row's series (in the training and test files)",
        "time": "the numeric column ordering a series' steps",
        "horizon": "steps forecast per series (default: the test file's steps per series)",
        "folds": f"validation origins per series (default {DEFAULT_FOLDS})",
    }

    @classmethod
    def check_options(cls, options: dict, columns: dict[str, list[str]]) -> list[str]:
        problems = super().check_options(options, columns)
        for key in ("series", "time"):
            value = options.get(key)
            if not isinstance(value, str) or not value:
                problems.append(f"answer.{key} must name a column (kind 'series')")
                continue
            for role in ("train", "test_features"):
                if role in columns and value not in columns[role]:
                    problems.append(f"answer.{key} = {value!r} is not a column of the {role} file")
        for key in ("horizon", "folds"):
            value = options.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                problems.append(f"answer.{key} must be a whole number of at least 1, not {value!r}")
        return problems

    @property
    def series_column(self) -> str:
        return self.options["series"]

    @property
    def time_column(self) -> str:
        return self.options["time"]

    # --- facts -------------------------------------------------------------------------------------
    def deliverable(self) -> list[str]:
        h = self.horizon()
        return [f"answer: a forecast of each series in {named(self.series_column)}: the {h} step(s) of "
                f"{named(self.time_column)} after its last training row, one prediction per test row; scored per series",
                f"in-loop validation: each series' last {h} step(s) before a cut, fitted on every series' "
                "history before that cut"]

    @classmethod
    def read_deliverable(cls, resources: str) -> dict:
        m = _FORECAST.search(resources)
        return {"series_column": m.group(1), "horizon": int(m.group(2)), "time_column": m.group(3)} if m else {}

    def horizon(self, data=None) -> int:
        if self.options.get("horizon"):
            return int(self.options["horizon"])
        data = data or validation.read_data(self.task)
        counts: dict[str, int] = defaultdict(int)
        for row in data.test_rows:
            counts[row.get(self.series_column, "")] += 1
        return max(1, round(median(counts.values()))) if counts else 1

    # --- in-loop validation ------------------------------------------------------------------------
    def plan(self):
        folds = int(self.options.get("folds") or DEFAULT_FOLDS)
        h = self.horizon()
        return SplitPlan("series", folds, column=self.time_column, chosen_by="task",
                         reason=f"answer kind 'series': the official test forecasts {h} step(s) of each series "
                                f"in `{self.series_column}` after its history")

    def _by_series(self, data) -> dict[str, list[list[int]]]:
        """series -> its rows grouped by distinct time, in time order (a cut never splits one time)."""
        steps: dict[str, dict[float, list[int]]] = defaultdict(lambda: defaultdict(list))
        for i, row in enumerate(data.rows):
            try:
                t = float(row[self.time_column])
            except (KeyError, TypeError, ValueError):
                raise ValueError(f"answer.time `{self.time_column}` is not a number in row {i + 2} of "
                                 f"{self.task.resources.files['train']}") from None
            steps[row.get(self.series_column, "")][t].append(i)
        return {s: [by_time[t] for t in sorted(by_time)] for s, by_time in steps.items()}

    def folds(self, plan, data, seed: int) -> list[tuple[list[int], list[int]]]:
        h = self.horizon(data)
        series = self._by_series(data)
        out = []
        for k in range(max(1, plan.folds)):
            fit: list[int] = []
            val: list[int] = []
            for steps in series.values():
                cut = len(steps) - (k + 1) * h
                if cut < MIN_HISTORY:
                    continue
                fit += [i for step in steps[:cut] for i in step]
                val += [i for step in steps[cut:cut + h] for i in step]
            if not val:
                break
            out.append((sorted(fit), sorted(val)))
        if not out:
            raise ValueError(f"no series in `{self.series_column}` has {MIN_HISTORY + h} steps: too short to "
                             f"hold out {h} step(s) and fit on the rest")
        return out

    def truth_columns(self) -> list[str]:
        return [*super().truth_columns(), self.series_column, self.time_column]

    # --- baselines ---------------------------------------------------------------------------------
    def fold_baselines(self, data, fit_idx: list[int], val_idx: list[int]) -> dict[str, bytes]:
        if self.kind().kind == CLASSIFICATION:
            return super().fold_baselines(data, fit_idx, val_idx)
        return self._per_series([data.rows[i] for i in fit_idx],
                                [{**data.rows[i], self.task.resources.id_column: str(k)}
                                 for k, i in enumerate(val_idx)])

    def trivial_predictions(self) -> dict[str, bytes]:
        if self.kind().kind == CLASSIFICATION:
            return super().trivial_predictions()
        data = validation.read_data(self.task)
        return self._per_series(data.rows, data.test_rows)

    def _per_series(self, history: list[dict], asked: list[dict]) -> dict[str, bytes]:
        """Persistence (each series' last value) and each series' mean; a series with no history
        gets the mean of all of it."""
        r = self.task.resources
        values: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for row in history:
            try:
                t, y = float(row[self.time_column]), float(row[r.target])
            except (KeyError, TypeError, ValueError):
                continue
            if math.isfinite(y):
                values[row.get(self.series_column, "")].append((t, y))
        everything = [y for pts in values.values() for _, y in pts]
        overall = sum(everything) / len(everything) if everything else 0.0
        last = {s: max(pts)[1] for s, pts in values.items()}
        mean = {s: sum(y for _, y in pts) / len(pts) for s, pts in values.items()}
        out = {}
        for name, by_series in (("persistence", last), ("series_mean", mean)):
            buffer = io.StringIO()
            w = csv.writer(buffer, lineterminator="\n")
            w.writerow([r.id_column, r.target])
            for row in asked:
                w.writerow([row[r.id_column], repr(by_series.get(row.get(self.series_column, ""), overall))])
            out[name] = buffer.getvalue().encode()
        return out
