"""The one place that decides whether a task is a regression or a classification.

Preflight, the trivial baselines, the plausibility checks and the offline scientist all ask
here; before, three of them decided separately and disagreed (an int contract with metric
``rmse`` and targets 0-4 read as a classification to the baselines and a regression to the
checks). The order, first that speaks wins: the task's own ``kind``; the metric's name (it says
what is scored); the prediction contract's type (``str``/``bool`` labels, ``float`` numbers);
then the training target (text, or a few whole numbers under an ``int`` or no contract).
"""
from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterable

REGRESSION, CLASSIFICATION = "regression", "classification"
KINDS = (REGRESSION, CLASSIFICATION)

# Metric names that say what is scored (lower-cased, '-' and spaces read as '_').
CLASSIFICATION_METRICS = frozenset({
    "accuracy", "balanced_accuracy", "top_k_accuracy", "error_rate", "misclassification_rate",
    "f1", "f1_score", "f1_macro", "f1_micro", "f1_weighted", "macro_f1", "micro_f1", "weighted_f1",
    "precision", "recall", "sensitivity", "specificity", "roc_auc", "auc", "auroc", "pr_auc",
    "average_precision", "log_loss", "logloss", "cross_entropy", "mcc", "matthews_corrcoef",
    "cohen_kappa", "kappa", "jaccard", "hamming_loss", "brier", "brier_score"})
REGRESSION_METRICS = frozenset({
    "rmse", "mse", "mae", "r2", "r_squared", "relative_l2", "rel_l2", "l2", "mape", "smape",
    "medae", "median_absolute_error", "max_error", "explained_variance", "msle", "rmsle", "nrmse",
    "nse", "pearson", "spearman", "crps", "pinball", "huber", "relative_error", "quantile_loss",
    "mase", "rmsse", "wape", "mean_relative_error", "relative_rmse", "residual"})
# An integer target with at most this many distinct values reads as class labels when nothing
# else says what the task is.
MAX_INFERRED_CLASSES = 20


@dataclass(frozen=True)
class KindDecision:
    kind: str     # "regression" | "classification"
    reason: str   # a sentence a person reads: why this kind


def metric_key(name: str) -> str:
    return re.sub(r"[\s\-]+", "_", name.strip().lower())


def metric_kind(metric: str) -> str | None:
    """The kind a metric's name says, or None: whole names first, then a known part
    (``validation_rmse``, ``macro_f1_weighted``)."""
    key = metric_key(metric)
    if not key:
        return None
    if key in CLASSIFICATION_METRICS:
        return CLASSIFICATION
    if key in REGRESSION_METRICS:
        return REGRESSION
    if any(p in key for p in ("accuracy", "f1", "auc", "kappa")):
        return CLASSIFICATION
    if re.search(r"(^|_)(r2|rmse|mse|mae|l2|mape|mase)($|_)", key):
        return REGRESSION
    return None


def _number(text: str) -> float | None:
    """The value of a number's text (inf included: it is a broken number, not a label), or None."""
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def decide_kind(declared: str | None, metric: str, contract_type: str | None,
                target_values: Iterable[object], target: str = "the target") -> KindDecision:
    """The task's kind and why (module docstring for the order)."""
    if declared in KINDS:
        return KindDecision(declared, "declared in Data_config.json 'kind'")
    by_metric = metric_kind(metric)
    if by_metric == CLASSIFICATION:
        return KindDecision(CLASSIFICATION, f"the metric '{metric}' scores class labels")
    if by_metric == REGRESSION:
        return KindDecision(REGRESSION, f"the metric '{metric}' scores numbers")
    if contract_type in ("str", "bool"):
        return KindDecision(CLASSIFICATION, f"the predictions contract gives '{target}' as {contract_type}")
    if contract_type == "float":
        return KindDecision(REGRESSION, f"the predictions contract gives '{target}' as float")
    present = [str(v).strip() for v in target_values if v is not None and str(v).strip() not in ("", "nan", "NaN")]
    numbers = [_number(v) for v in present]
    if any(n is None for n in numbers):
        return KindDecision(CLASSIFICATION, f"the target '{target}' holds text")
    distinct = {n for n in numbers if n is not None and math.isfinite(n)}
    if present and all(n == int(n) for n in distinct) and len(distinct) <= MAX_INFERRED_CLASSES:
        return KindDecision(CLASSIFICATION, f"the target '{target}' holds {len(distinct)} distinct whole numbers"
                            + (" and the contract says int" if contract_type == "int" else ""))
    return KindDecision(REGRESSION, f"the target '{target}' holds numbers")


def task_kind(task) -> KindDecision:
    """``decide_kind`` for a loaded task, reading its training target (cached per file state)."""
    r = task.resources
    contract = r.prediction_columns.get(r.target or "")
    declared = r.kind
    if declared in KINDS or metric_kind(task.metric.name) or contract in ("str", "bool", "float"):
        return decide_kind(declared, task.metric.name, contract, (), r.target or "the target")
    path = task.folder / r.files["train"] if "train" in r.files and r.target else None
    values: tuple[str, ...] = ()
    if path is not None and path.is_file():
        st = path.stat()
        values = _target_column(str(path), st.st_mtime_ns, st.st_size, r.target)
    return decide_kind(declared, task.metric.name, contract, values, r.target or "the target")


@lru_cache(maxsize=32)
def _target_column(path: str, _mtime_ns: int, _size: int, target: str) -> tuple[str, ...]:
    with open(path, newline="", encoding="utf-8", errors="replace") as fh:
        return tuple(row.get(target) or "" for row in csv.DictReader(fh))
