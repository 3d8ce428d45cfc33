"""Issue 38: ``python -m engine run`` and every search end in one module (engine/ending.py), so the
same team on the same task and seed ends with the same official lines, whichever way it ran."""
from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.evolve import evolve
from engine.run_spec import RunSpec

ROOT = Path(__file__).resolve().parents[2]
TASK = ROOT / "examples" / "discontinuous-1d"

pytestmark = pytest.mark.slow


def _ending(text: str) -> list[str]:
    """The summary's lines about the baselines: the 'baselines' line and the leads under it."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("baselines  "))
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith(" ")), len(lines))
    return lines[start:end]


def test_a_run_and_a_search_of_the_same_team_end_with_the_same_official_lines(tmp_path, monkeypatch):
    monkeypatch.setenv("TRELLIS_MCP_CONFIG", "none")
    run = subprocess.run([sys.executable, "-m", "engine", "run", str(TASK), "--runs-dir", str(tmp_path / "runs"),
                          "--seed", "0", "--no-single-agent", "--executor", "subprocess"],
                         cwd=ROOT, env={**os.environ}, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    out = io.StringIO()
    searched = evolve(TASK,
                      RunSpec(search="fixed", iterations=0, seed=0, single_agent=False, executor="subprocess",
                              warm_start=False),
                      runs_dir=tmp_path / "searches", out=out)
    ran, search = _ending(run.stdout), _ending(out.getvalue())
    assert ran == search
    team = f"team {searched.final['official']['value']:.6g}"
    assert team in ran[0] and "lead over constant" in "\n".join(ran)  # a real comparison, not two empty ones
