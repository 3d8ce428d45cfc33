"""Trivial baselines: what a team's result must beat to mean anything.

Two predictors any scientist would try first, computed by the engine itself (no model, no
sandbox, no tokens): the constant (the training mean for a regression, the majority class for a
classification) and the nearest neighbour (each test row gets the target of the closest training
row, numeric features standardised on the training rows). Both are scored by the task's own
evaluate.py, once, after the search's final commitment, beside the team's official score.

And one that does use a model: the single-agent workflow (one agent plays every role) on the
same budget as the team. If a team of agents cannot beat one agent, its structure adds nothing.
"""
from __future__ import annotations

import csv
import io
import math
from collections import Counter
from pathlib import Path

from .budget import Budget
from .errors import ModelUnavailable
from .assessment.kind import CLASSIFICATION, task_kind
from .evaluation import evaluate_many
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


def trivial_predictions(task: Task) -> dict[str, bytes]:
    """Each trivial baseline's answer to the official test (the task's answer kind's)."""
    from .assessment import assessment_for
    return assessment_for(task).trivial_predictions()


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
    import numpy as np

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


def official_baselines(task: Task, predictions: dict[str, bytes] | str | None = None) -> dict[str, dict]:
    """Each trivial baseline's official score (evaluate.py on the held-out targets), of
    ``predictions`` when given (what trivial_or_error() returned). Run after the final commitment
    only, like the team's own official score."""
    if predictions is None:
        predictions = trivial_or_error(task)
    if isinstance(predictions, str):
        return {name: {"ok": False, "error": f"baseline not computed: {predictions}"} for name in BASELINES}
    return dict(zip(predictions, evaluate_many(task, list(predictions.values()))))


def trivial_or_error(task: Task) -> dict[str, bytes] | str:
    """trivial_predictions(), or why the task's files cannot give them."""
    try:
        return trivial_predictions(task)
    except (OSError, KeyError, ValueError, IndexError) as exc:
        return str(exc)


def single_agent_baseline(task: Task, run_dir: Path, *, seed: int, budget: Budget, executor=None,
                          model_override: str | None = None, control=None, tools=None, models=None,
                          discover_tools: bool = False, cache_dir: Path | None = None, replay_only: bool = False) -> dict:
    """Run the single-agent workflow on a budget with the team's limits and score it officially.
    It is given the tools the team was given: ``tools`` (a search's discovered MCP tools), or with
    ``discover_tools`` those it discovers itself, each role's allocation to its one agent.
    Returns ``{"workflow_hash", "status", "reason", "official", "usage", "trace", "run_dir",
    "predictions_sha256"}``; a model that
    cannot be called is a failed baseline, never a failed run (the team's result stands)."""
    from .control import NoControl
    from .runner import RunConfig, run_workflow
    from .synthesis import single_agent_workflow

    workflow = single_agent_workflow(task)
    if tools is not None:  # the team's discovered tools: the one agent is given every role's
        from .tools.allocation import allocate
        from .tools.registry import use

        with use(tools.registry):
            workflow = allocate(workflow, tools.registry).validate()
    config = RunConfig(run_dir=Path(run_dir), seed=seed, budget=Budget(**budget.limits()), scoring="official",
                       model_override=model_override, models=models, cache_dir=cache_dir, replay_only=replay_only,
                       run_id=Path(run_dir).name, control=control or NoControl(),
                       tools=tools, discover_tools=discover_tools and tools is None, allocate_tools=True)
    try:
        result = run_workflow(task, workflow, config, executor=executor)
    except ModelUnavailable as exc:
        return {"workflow_hash": workflow.hash, "status": "failed", "reason": str(exc),
                "official": {"ok": False, "error": f"the single agent could not call its model: {exc}"},
                "usage": None, "trace": "", "run_dir": str(run_dir), "predictions_sha256": None}
    official = result.metric if result.metric and result.metric.get("ok") else \
        {"ok": False, "error": (result.metric or {}).get("error") or result.reason or f"the single agent {result.status}"}
    return {"workflow_hash": workflow.hash, "status": result.status, "reason": result.reason,
            "official": official, "usage": result.usage, "trace": result.trace_path,
            "run_dir": str(run_dir), "predictions_sha256": result.predictions_sha256}


def baseline_files(trivial: dict[str, bytes] | str, scores: dict[str, dict], solo: dict | None
                   ) -> dict[str, tuple[bytes | None, dict]]:
    """Each baseline's predictions file beside its official score, for the paired comparison with
    the team after the final commitment (engine/official_gap.py)."""
    from .official import saved_predictions

    files = {name: ((trivial.get(name) if isinstance(trivial, dict) else None), score)
             for name, score in scores.items() if name != "single_agent"}
    if solo is not None:
        files["single_agent"] = (saved_predictions(Path(solo["run_dir"]), solo.get("predictions_sha256")),
                                 solo["official"])
    return files


def describe_single_agent(solo: dict) -> str:
    """One line for a single_agent_baseline() result: how it ended, its tokens, its trace."""
    why = f": {solo['reason'][:120]}" if solo["status"] != "completed" and solo.get("reason") else ""
    return (f"{solo['status']}, {(solo.get('usage') or {}).get('tokens', 0)} tokens{why}; "
            f"trace {solo.get('trace') or '-'}")


def describe(baselines: dict[str, dict], team: dict | None) -> str:
    """One line: each baseline's official score, and whether the team beat it."""
    def fmt(d: dict) -> str:
        return f"{d['value']:.6g}" if d.get("ok") else "n/a"

    parts = [f"{name.replace('_', ' ')} {fmt(d)}" for name, d in baselines.items()]
    line = " · ".join(parts)
    if team and team.get("ok"):
        from .selection import better, same

        hib = bool(team.get("higher_is_better"))
        known = {name.replace("_", " "): d["value"] for name, d in baselines.items() if d.get("ok")}
        # float noise is no lead: a team 1.1e-16 above the constant's r2 of 0 ties it
        scale = max((abs(v) for v in (team["value"], *known.values()) if math.isfinite(v)), default=0.0)
        beaten = [n for n, v in known.items() if better(team["value"], v, hib, scale)]
        tied = [n for n, v in known.items() if same(team["value"], v, scale)]
        missed = [n for n in known if n not in beaten and n not in tied]
        said = [f"does NOT beat {', '.join(missed)}"] if missed else []
        said += [f"ties {', '.join(tied)}"] if tied else []
        line += f"   team {fmt(team)}: " + ("; ".join(said) if said else "beats every baseline")
    return line
