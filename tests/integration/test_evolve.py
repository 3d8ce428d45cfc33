"""The evolve command end to end, one real search of each kind (real sandboxed training): search,
final commitment, then the official evaluator once. The search logic itself is tested on the
fake executor in tests/unit/."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

from engine.evolve import evolve
from engine.run_spec import RunSpec

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def test_evolve_command_prints_each_iteration(tmp_path, light_task):
    # light_task: a task of two validation folds; what is tested is what the command prints
    env = {"PATH": "/usr/bin:/bin", "LITELLM_LOCAL_MODEL_COST_MAP": "True", "TRELLIS_VAR_DIR": str(tmp_path),
           # the defaults (Docker when built, the shipped MCP servers) are test_cli.py's to test
           "TRELLIS_EXECUTOR": "subprocess", "TRELLIS_MCP_CONFIG": "none"}
    proc = subprocess.run([sys.executable, "manage.py", "evolve", str(light_task), "--search",
                           "mimosa", "--iterations", "1", "--seed", "1"], cwd=ROOT, capture_output=True, text=True,
                          env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.count("iter ") >= 1 and "budget left" in out
    # how many public checks (plausibility included) the candidate passed, of how many ran
    assert all(int(a) <= int(b) for a, b in re.findall(r"checks (\d+)/(\d+) ", out)) and "checks " in out, out
    assert ("ACCEPTED" in out) or ("rejected" in out)
    # each mutation says, on a line of its own, which of the judge's criteria it addresses
    assert re.search(r"why: addresses (goal_alignment|collaboration_efficiency|output_quality|answer_plausibility) "
                     r"\(\d\.\d+", out), out
    assert "initial " in out and "final " in out and "official relative_l2" in out
    # beside the team, after the commitment: the single agent on the same budget, and the hindsight
    assert re.search(r"baselines .*single agent \d", out), out
    assert re.search(r"single +completed, \d+ tokens", out), out
    # ... and whether the team's lead over each is beyond the test set's noise
    assert re.search(r"the team's official lead \(positive = better; paired bootstrap, \d+ resamples of the \d+ "
                     r"held-out rows", out), out
    assert re.search(r"lead over single agent: (none, the same prediction|[-+][\d.e-]+, 95 % \[)", out), out
    assert re.search(r"hindsight +rank correlations over \d+ probed candidate", out) and "validation ~ official" in out


def test_evolve_with_the_tree_scores_root_and_champion_officially_after_the_search(tmp_path, examples):
    result = evolve(examples / "discontinuous-1d", RunSpec(search="tree", iterations=1, seed=1, single_agent=False),
                    runs_dir=tmp_path, out=open(tmp_path / "log", "w"))
    i, f = result.initial["official"], result.final["official"]
    assert i["ok"] and f["ok"] and i["metric"] == "relative_l2"
    assert result.final["validation"] <= result.initial["validation"]
    # the hindsight ran every scored node's program on the task's data and scored it officially
    nodes = [c for c in result.hindsight["candidates"] if c["label"].startswith("node ")]
    assert len(nodes) >= 2 and all(c["official"] is not None for c in nodes)
    assert f["value"] in [c["official"] for c in nodes]
    # what the held-out plots draw (issue 26 item 7): the predictions that were scored, kept
    from engine.evaluation import evaluate_predictions
    from engine.ending import FINAL_PREDICTIONS
    from engine.task import load_task

    kept = (result.run_dir / FINAL_PREDICTIONS).read_bytes()
    assert evaluate_predictions(load_task(examples / "discontinuous-1d"), kept)["value"] == f["value"]


def test_evolve_scimars_prints_each_editor_and_the_decision(tmp_path, light_task):
    env = {"PATH": "/usr/bin:/bin", "LITELLM_LOCAL_MODEL_COST_MAP": "True", "TRELLIS_VAR_DIR": str(tmp_path),
           # the defaults (Docker when built, the shipped MCP servers) are test_cli.py's to test
           "TRELLIS_EXECUTOR": "subprocess", "TRELLIS_MCP_CONFIG": "none"}
    proc = subprocess.run([sys.executable, "manage.py", "evolve", str(light_task), "--search",
                           "scimars", "--iterations", "1", "--no-archive", "--no-single-agent", "--memory"], cwd=ROOT,
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr
    for editor in ("role_editor", "coordination_editor", "memory_editor"):
        assert editor in proc.stdout
    assert "round  1" in proc.stdout and "decision: " in proc.stdout and "official relative_l2" in proc.stdout
    # SciMARS + Memory: one graph for the search, and the memory editor's change said in words
    assert "memory: one evidence graph shared by every probe" in proc.stdout
    assert re.search(r"memory_policy_change on memory\.\w+ \{", proc.stdout), proc.stdout
