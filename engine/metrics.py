"""Metrics the engine computes itself, for in-loop validation.

The task's evaluate.py is the official scorer on held-out data and stays outside the search;
inside the search, candidates are scored on a split of the training data with the same
metric, implemented here.
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

MetricFn = Callable[[Sequence[float], Sequence[float]], float]


def relative_l2(pred: Sequence[float], true: Sequence[float]) -> float:
    num = math.sqrt(sum((p - t) ** 2 for p, t in zip(pred, true)))
    den = math.sqrt(sum(t * t for t in true))
    return num / den if den else float("inf")


def rmse(pred: Sequence[float], true: Sequence[float]) -> float:
    return math.sqrt(sum((p - t) ** 2 for p, t in zip(pred, true)) / max(1, len(true)))


def mae(pred: Sequence[float], true: Sequence[float]) -> float:
    return sum(abs(p - t) for p, t in zip(pred, true)) / max(1, len(true))


def r2(pred: Sequence[float], true: Sequence[float]) -> float:
    mean = sum(true) / max(1, len(true))
    ss_res = sum((t - p) ** 2 for p, t in zip(pred, true))
    ss_tot = sum((t - mean) ** 2 for t in true)
    return 1.0 - ss_res / ss_tot if ss_tot else 0.0


def accuracy(pred: Sequence[float], true: Sequence[float]) -> float:
    return sum(1 for p, t in zip(pred, true) if p == t) / max(1, len(true))


METRICS: dict[str, MetricFn] = {"relative_l2": relative_l2, "rmse": rmse, "mae": mae, "r2": r2,
                                "accuracy": accuracy}


def metric_fn(name: str) -> MetricFn:
    try:
        return METRICS[name]
    except KeyError:
        raise KeyError(f"no in-loop implementation of metric {name!r}; known: {', '.join(METRICS)}") from None
