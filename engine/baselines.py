"""Trivial baselines: what a team's result must beat to mean anything.

Two predictors any scientist would try first, computed by the engine itself (no model, no
sandbox, no tokens): the constant (the training mean for a regression, the majority class for a
classification) and the nearest neighbour (each test row gets the target of the closest training
row, numeric features standardised on the training rows), for one prediction per row; an answer
kind with other answers makes its own (engine/assessment). Both are scored by the task's own
evaluate.py, once, after the search's final commitment, beside the team's official score
(engine/official.py), and on every validation fold beside the team's candidates.

The baseline that does use a model, the single-agent workflow on the team's budget, is run at
the end of a run (engine/ending.py).
"""
from __future__ import annotations

import csv
import io
import math
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .task_kind import CLASSIFICATION, task_kind

if TYPE_CHECKING:  # the type only: a task's assessment uses these predictors (engine/task.py is above)
    from .task import Task

BASELINES = ("constant", "nearest_neighbour")


def _rows(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        return list(reader.fieldnames or []), list(reader)


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _is_classification(task: Task) -> bool:
    return task_kind(task).kind == CLASSIFICATION


def _label(text: str, contract: str) -> str:
    """A class label written the way the contract wants it (2.0 -> 2 for an int contract)."""
    value = _number(text)
    if contract == "int" and value is not None and value == int(value):
        return str(int(value))
    return text


def row_trivial_predictions(task: Task) -> dict[str, bytes]:
    """Each baseline's predictions for the task's test rows, as a contract-following CSV."""
    r = task.resources
    _, train = _rows(task.folder / r.files["train"])
    _, test = _rows(task.folder / r.files["test_features"])
    return predict(task, train, test)


def predict(task: Task, train: list[dict[str, str]], test: list[dict[str, str]]) -> dict[str, bytes]:
    """Each baseline fitted on ``train`` rows and predicting ``test`` rows (which carry the id
    column), as contract-following CSVs: for the task's test file, or for a validation fold."""
    r = task.resources
    target, id_column = r.target or "", r.id_column or "id"
    targets = [row[target] for row in train]
    classification = _is_classification(task)
    contract = r.prediction_columns.get(target, "float")
    if classification:
        constant = _label(Counter(targets).most_common(1)[0][0], contract)
    else:
        values = [v for v in (_number(t) for t in targets) if v is not None]
        constant = repr(sum(values) / len(values)) if values else "0"
    features = [f for f in r.features if train and f in train[0] and test and f in test[0]]
    neighbour = _nearest(train, test, features, targets)
    out = {}
    for name, predict_row in (("constant", lambda i: constant),
                              ("nearest_neighbour", lambda i: _label(neighbour[i], contract) if classification
                               else neighbour[i])):
        buffer = io.StringIO()
        w = csv.writer(buffer, lineterminator="\n")
        w.writerow([id_column, target])
        for i, row in enumerate(test):
            w.writerow([row[id_column], predict_row(i)])
        out[name] = buffer.getvalue().encode()
    return out


def _nearest(train: list[dict], test: list[dict], features: list[str], targets: list[str]) -> list[str]:
    numeric = [f for f in features if all(_number(row.get(f, "")) is not None for row in train + test)]
    if not numeric or not train:
        most = Counter(targets).most_common(1)[0][0] if targets else "0"
        return [most] * len(test)
    fit = np.array([[float(row[f]) for f in numeric] for row in train])
    new = np.array([[float(row[f]) for f in numeric] for row in test]).reshape(len(test), len(numeric))
    mean, sd = fit.mean(axis=0), fit.std(axis=0)
    sd[sd == 0] = 1.0
    fit, new = (fit - mean) / sd, (new - mean) / sd
    out: list[str] = []
    for start in range(0, len(new), 256):  # bounded memory: 256 x n_train distances at a time
        block = new[start:start + 256]
        d = (block ** 2).sum(1)[:, None] - 2 * block @ fit.T + (fit ** 2).sum(1)[None, :]
        out += [targets[j] for j in d.argmin(axis=1)]
    return out


