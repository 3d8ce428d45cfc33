"""The official evaluator: run once, after the final commitment, outside every search loop.

Nothing under engine/search imports this module (a test checks it); the orchestrator calls
it after a search has returned its final workflow.
"""
from __future__ import annotations

from pathlib import Path

from .artifacts import ArtifactStore
from .evaluation import evaluate_predictions
from .task import Task


def official_metric(task: Task, run_dir: Path, predictions_sha256: str | None) -> dict:
    if predictions_sha256 is None:
        return {"ok": False, "error": "the workflow delivered no predictions"}
    data = ArtifactStore(Path(run_dir) / "artifacts").read(predictions_sha256)
    if data is None:
        return {"ok": False, "error": f"predictions {predictions_sha256[:12]} are missing from {run_dir}"}
    return official_for_predictions(task, data)


def official_for_predictions(task: Task, predictions: bytes) -> dict:
    """evaluate.py's held-out score of a predictions file's bytes."""
    return {**evaluate_predictions(task, predictions), "evaluator": "evaluate.py (official, held out)"}


def official_for_code(task: Task, code: str, executor) -> dict:
    """Run a committed program on the task's real data, then score it officially."""
    from .sandbox import ExecutionRequest, UnsafeOutput

    result = executor.run(ExecutionRequest(code=code, input_files=task.input_files(), limits=task.resources.limits))
    if not result.ok:
        return {"ok": False, "error": f"the committed program {result.status} on the task's data"}
    try:
        # evaluate.py scores a copy of these bytes, never a file the program could point elsewhere
        predictions = result.read_file(task.resources.predictions_file)
    except FileNotFoundError:
        return {"ok": False, "error": "the committed program wrote no predictions on the task's data"}
    except UnsafeOutput as exc:
        return {"ok": False, "error": f"predictions refused: {exc}"}
    return official_for_predictions(task, predictions)
