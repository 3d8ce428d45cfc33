"""The official evaluator: run once, after the final commitment, outside every search loop.

Nothing under engine/search imports this module (a test checks it); the orchestrator calls
it after a search has returned its final workflow.
"""
from __future__ import annotations

import csv
from pathlib import Path

from .artifacts import ArtifactStore
from .assessment import trivial_or_error
from .baselines import BASELINES
from .evaluation import evaluate_many
from .sandbox import ExecutionRequest, UnsafeOutput
from .task import Task


def official_metric(task: Task, run_dir: Path, predictions_sha256: str | None) -> dict:
    if predictions_sha256 is None:
        return {"ok": False, "error": "the workflow delivered no predictions"}
    data = saved_predictions(run_dir, predictions_sha256)
    if data is None:
        return {"ok": False, "error": f"predictions {predictions_sha256[:12]} are missing from {run_dir}"}
    return official_for_predictions(task, data)


def saved_predictions(run_dir: Path, predictions_sha256: str | None) -> bytes | None:
    """A run's delivered predictions, read back from its artifact store."""
    if predictions_sha256 is None:
        return None
    return ArtifactStore(Path(run_dir) / "artifacts").read(predictions_sha256)


def official_for_predictions(task: Task, predictions: bytes) -> dict:
    """evaluate.py's held-out score of a predictions file's bytes (the task's answer kind's)."""
    return task.assessment().official(predictions)


MAX_TRUTH_BYTES = 64 * 1024 * 1024


def heldout_truth(task: Task) -> dict[str, str] | None:
    """The held-out answer key as ``{id: target}``, for the plots of the champion bundle made
    after the final commitment (engine/bundle.py): the first CSV in the task's ``heldout/`` that
    has the id and target columns. None when there is none (evaluate.py may keep its truth
    elsewhere). Never called inside a search."""
    r = task.resources
    heldout = Path(task.folder) / "heldout"
    if not (r.id_column and r.target) or not heldout.is_dir():
        return None
    for path in sorted(heldout.glob("*.csv")):
        if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_TRUTH_BYTES:
            continue
        with path.open(newline="", encoding="utf-8", errors="replace") as fh:
            reader = csv.DictReader(fh)
            if r.id_column not in (reader.fieldnames or []) or r.target not in (reader.fieldnames or []):
                continue
            return {str(row[r.id_column]).strip(): str(row[r.target]).strip() for row in reader}
    return None


def heldout_columns(task: Task, columns: list[str]) -> dict[str, dict[str, str]] | None:
    """``{id: {column: value}}`` of the held-out answer key's ``columns`` beyond id and target
    (a series' name and time, which a per-series metric needs), or None when it lacks them."""
    r = task.resources
    heldout = Path(task.folder) / "heldout"
    if not (r.id_column and r.target) or not heldout.is_dir():
        return None
    for path in sorted(heldout.glob("*.csv")):
        if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_TRUTH_BYTES:
            continue
        with path.open(newline="", encoding="utf-8", errors="replace") as fh:
            reader = csv.DictReader(fh)
            header = reader.fieldnames or []
            if not all(c in header for c in (r.id_column, r.target, *columns)):
                continue
            return {str(row[r.id_column]).strip(): {c: str(row[c]).strip() for c in columns} for row in reader}
    return None


def official_for_code(task: Task, code: str, executor) -> dict:
    """Run a committed program on the task's real data, then score it officially."""
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


def official_baselines(task: Task, predictions: dict[str, bytes] | str | None = None) -> dict[str, dict]:
    """Each trivial baseline's official score (evaluate.py on the held-out targets), of
    ``predictions`` when given (what trivial_or_error() returned). Run after the final commitment
    only, like the team's own official score."""
    if predictions is None:
        predictions = trivial_or_error(task)
    if isinstance(predictions, str):
        return {name: {"ok": False, "error": f"baseline not computed: {predictions}"} for name in BASELINES}
    return dict(zip(predictions, evaluate_many(task, list(predictions.values()))))
