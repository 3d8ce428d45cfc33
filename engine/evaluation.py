"""Scoring with the task's own evaluate.py.

evaluate.py is the task author's code and holds the held-out targets. It runs in a sandbox of its
own (engine/evaluator_sandbox.py: the agents' sandbox and the task's limits, on a copy of the task
folder), never in an agent's, and agents never see its answer key: the held-out folder is copied
into its sandbox only when it scores officially.

Its contract (README, 'Task folders'): ``python evaluate.py PREDICTIONS.csv [--truth TRUTH.csv]``
prints one JSON line ``{"metric", "value", "higher_is_better", "n"}`` and exits 0, or says why
on stderr and exits 2. With ``--truth`` it scores against that file instead of the held-out
targets: that is how in-loop validation folds are scored with the task's own metric.
"""
from __future__ import annotations

import json
import math
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .evaluator_sandbox import EVALUATE, INPUT_DIR, run_evaluate_py, run_task_code, task_inputs

if TYPE_CHECKING:  # a task holds its assessment (engine/task.py): the type only, never the module
    from .task import Task

FOLD_SCORER = Path(__file__).with_name("fold_scorer.py")
SCORER = "trellis_fold_scorer.py"  # its name in the sandbox, beside evaluate.py


def evaluate_predictions(task: Task, predictions: bytes, timeout_s: float = 300.0) -> dict:
    """Score a predictions file against the held-out targets."""
    with tempfile.TemporaryDirectory(prefix="trellis-eval-") as tmp:
        name = Path(task.resources.predictions_file).name
        path = Path(tmp) / name
        path.write_bytes(predictions)
        rel = f"{INPUT_DIR}/{name}"
        run = run_evaluate_py(task, {rel: path}, [rel], timeout_s, with_answers=True)
    if run.problem:
        return {"ok": False, "error": run.problem}
    return read_result(task, run.exit_code, run.stdout, run.stderr)


def read_result(task: Task, returncode: int, stdout: str, stderr: str) -> dict:
    """What one evaluate.py call says, by its contract."""
    if returncode != 0:
        if stderr.rstrip().endswith("MemoryError"):  # the sandbox's address-space cap, met in Python
            return {"ok": False, "error": f"evaluate.py reached the task's memory limit of "
                                          f"{task.resources.limits.memory_mb} MB (limits.memory_mb in Data_config.json)"}
        return {"ok": False, "error": f"evaluate.py rejected the predictions: {stderr.strip()[-500:]}"}
    lines = [ln for ln in stdout.splitlines() if ln.strip().startswith("{")]
    try:
        result = json.loads(lines[-1])
        value = float(result["value"])
    except (IndexError, json.JSONDecodeError, KeyError, TypeError, ValueError):
        return {"ok": False, "error": f"evaluate.py printed no result line: {stdout.strip()[-300:]!r}"}
    if not math.isfinite(value):  # 1e308 predictions square to inf: not a score, and not JSON either
        return {"ok": False, "error": f"evaluate.py scored the predictions {value} (not a finite number): the "
                                      "predictions overflow the metric"}
    return {"ok": True, "metric": result.get("metric", task.metric.name), "value": value,
            "higher_is_better": bool(result.get("higher_is_better", task.metric.higher_is_better)),
            "n": result.get("n")}


def supports_truth(task: Task) -> bool:
    """Does this task's evaluate.py take ``--truth``? (It names the option if it does; an
    older one is given no argument it would refuse.)"""
    try:
        return "--truth" in task.evaluator.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False


@dataclass(frozen=True)
class FoldJob:
    predictions: Path
    truth: Path | None  # None: the held-out answer key (official scoring, after the final commitment)


def evaluate_folds(task: Task, jobs: list[FoldJob], timeout_s: float = 300.0) -> list[dict]:
    """Score each job's predictions against its own truth file with evaluate.py --truth, all
    in one process (fold_scorer.py): one import of numpy and pandas instead of one per fold."""
    if not jobs:
        return []
    official = any(job.truth is None for job in jobs)
    with tempfile.TemporaryDirectory(prefix="trellis-folds-") as tmp:
        inputs = task_inputs(task, with_answers=official)
        specs = []
        for i, job in enumerate(jobs):
            predictions = f"{INPUT_DIR}/{i:04d}/p/{job.predictions.name}"
            inputs[predictions] = job.predictions
            truth = None
            if job.truth is not None:
                truth = f"{INPUT_DIR}/{i:04d}/t/{job.truth.name}"
                inputs[truth] = job.truth
            specs.append({"predictions": predictions, "truth": truth})
        jobs_path = Path(tmp) / "jobs.json"
        jobs_path.write_text(json.dumps(specs))
        inputs[f"{INPUT_DIR}/jobs.json"] = jobs_path
        run = run_task_code(task, SCORER, FOLD_SCORER.read_text(encoding="utf-8"),
                            [EVALUATE, f"{INPUT_DIR}/jobs.json", "results.json"], inputs, timeout_s,
                            outputs=("results.json",))
    if run.problem:
        what = "score the validation folds" if not official else "score the predictions"
        problem = run.problem.replace("did not finish within", f"did not {what} within")
        return [{"ok": False, "error": problem}]
    try:
        results = json.loads(run.outputs["results.json"])
    except (KeyError, ValueError):
        return [{"ok": False, "error": f"evaluate.py could not score the validation folds: "
                                       f"{run.stderr.strip()[-500:]}"}]
    return [read_result(task, r.get("exit", 1), r.get("stdout", ""), r.get("stderr", "")) for r in results]


def evaluate_many(task: Task, predictions: list[bytes], timeout_s: float = 300.0) -> list[dict]:
    """Score several prediction files against the held-out targets in one evaluate.py process
    (what the hindsight over a search's candidates needs: dozens of files, one import)."""
    if not predictions:
        return []
    with tempfile.TemporaryDirectory(prefix="trellis-official-") as tmp:
        jobs = []
        for i, data in enumerate(predictions):
            path = Path(tmp) / f"{i:04d}" / task.resources.predictions_file
            path.parent.mkdir()
            path.write_bytes(data)
            jobs.append(FoldJob(path, None))
        scores = evaluate_folds(task, jobs, timeout_s)
    if len(scores) != len(predictions):  # the scorer failed as a whole: say so for each file
        scores = [scores[0] if scores else {"ok": False, "error": "evaluate.py scored nothing"}] * len(predictions)
    return [{**s, "evaluator": "evaluate.py (official, held out)"} if s.get("ok") else s for s in scores]
