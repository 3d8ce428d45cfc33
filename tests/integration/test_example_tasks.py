"""The newer example tasks run end to end offline: `python -m engine run examples/<task>` with the
offline provider finishes and prints the metric evaluate.py computed, under the name
Evaluation.md gives it. The score may be poor; the offline scientist is not under test here."""
from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from engine.task import load_task

ROOT = Path(__file__).resolve().parents[2]
METRIC_LINE = re.compile(r"^metric\s+(\S+) = (\S+)\s+\((lower|higher) is better; computed by evaluate\.py\)", re.M)

# Each example added for issue 11: an extrapolation, a classification and a group split.
NEW_EXAMPLES = [
    pytest.param("pendulum-extrapolation", id="pendulum-extrapolation"),
    pytest.param("wine-cultivar", id="wine-cultivar"),
    pytest.param("soil-respiration-sites", id="soil-respiration-sites"),
]


@pytest.mark.slow  # a whole engine process trains and scores for real
@pytest.mark.parametrize("task", NEW_EXAMPLES)
def test_offline_run_completes_and_prints_the_evaluate_py_metric(task, tmp_path):
    env = {"PATH": "/usr/bin:/bin", "LITELLM_LOCAL_MODEL_COST_MAP": "True", "TRELLIS_VAR_DIR": str(tmp_path),
           # the defaults (Docker when built, the shipped MCP servers) are test_cli.py's to test
           "TRELLIS_EXECUTOR": "subprocess", "TRELLIS_MCP_CONFIG": "none"}
    proc = subprocess.run([sys.executable, "-m", "engine", "run", f"examples/{task}", "--seed", "0",
                           "--runs-dir", str(tmp_path / "runs"), "--no-single-agent"],
                          cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "status: completed" in proc.stdout
    found = METRIC_LINE.search(proc.stdout)
    assert found, proc.stdout[-2000:]
    metric = load_task(ROOT / "examples" / task).metric
    assert found.group(1) == metric.name
    assert found.group(3) == ("higher" if metric.higher_is_better else "lower")
    assert math.isfinite(float(found.group(2)))
