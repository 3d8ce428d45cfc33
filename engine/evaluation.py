"""Scoring with the task's own evaluate.py, run as a separate process.

evaluate.py is the task author's code and holds the held-out targets; it runs beside the
task folder, never inside an agent's sandbox, and agents never see its answer key.
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from .task import Task


def evaluate_predictions(task: Task, predictions: bytes, timeout_s: float = 300.0) -> dict:
    with tempfile.TemporaryDirectory(prefix="trellis-eval-") as tmp:
        path = Path(tmp) / task.resources.predictions_file
        path.write_bytes(predictions)
        try:
            proc = subprocess.run([sys.executable, str(task.evaluator), str(path)], cwd=task.folder,
                                  capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return {"ok": False, "error": f"evaluate.py did not finish within {timeout_s:.0f} s"}
    if proc.returncode != 0:
        return {"ok": False, "error": f"evaluate.py rejected the predictions: {proc.stderr.strip()[-500:]}"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip().startswith("{")]
    try:
        result = json.loads(lines[-1])
        value = float(result["value"])
    except (IndexError, json.JSONDecodeError, KeyError, TypeError, ValueError):
        return {"ok": False, "error": f"evaluate.py printed no result line: {proc.stdout.strip()[-300:]!r}"}
    return {"ok": True, "metric": result.get("metric", task.metric.name), "value": value,
            "higher_is_better": bool(result.get("higher_is_better", task.metric.higher_is_better)),
            "n": result.get("n")}
