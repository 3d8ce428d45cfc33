"""What a benchmark hands to benchmarks/performance.py: its headline figures, each beside its goal.

A benchmark calls ``record(...)`` for each figure it measures; when it runs under performance.py
(``TRELLIS_BENCH_FIGURES`` names a file) each figure is appended there as one JSON line, and
otherwise nothing happens: the benchmark's own table is its output.
"""
from __future__ import annotations

import json
import os

ENV = "TRELLIS_BENCH_FIGURES"
# read once, at import: a benchmark may replace its environment before it records (live_updates.py
# runs the studio's own)
_PATH = os.environ.get(ENV)


def record(figure: str, value: float, unit: str, goal: float | None, lower_is_better: bool = True,
           peer: str = "", note: str = "") -> None:
    """One figure: ``value`` in ``unit`` against ``goal`` (None: shown for comparison only); ``peer``
    names what the goal is a peer's figure (LangGraph's), measured in the same run."""
    path = _PATH
    if not path:
        return
    met = None if goal is None else (value < goal if lower_is_better else value > goal)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"figure": figure, "value": value, "unit": unit, "goal": goal, "met": met,
                             "lower": lower_is_better, "peer": peer, "note": note}) + "\n")
