"""The evolve command end to end: search, final commitment, then the official evaluator once."""
import subprocess
import sys
from pathlib import Path

from engine.budget import Budget
from engine.evolve import evolve
from engine.trace import read_events

ROOT = Path(__file__).resolve().parents[2]


def test_evolve_reports_initial_and_final_official_metrics_side_by_side(tmp_path, examples):
    calls = []

    def counting_official(task, run_dir, sha):
        from engine.official import official_metric

        calls.append(sha)
        return official_metric(task, run_dir, sha)

    result = evolve(examples / "diabetes-progression", "mimosa", iterations=2, seed=1,
                    budget=Budget(max_tokens=1_000_000), runs_dir=tmp_path, out=open(tmp_path / "log", "w"),
                    official=counting_official)
    assert len(calls) == 2  # exactly once per end, after the search
    for end in (result.initial, result.final):
        assert end["official"]["ok"] and end["official"]["metric"] == "r2"
    assert result.final["J"] >= result.initial["J"]
    events = list(read_events(result.run_dir / "search.jsonl"))
    kinds = [e.kind for e in events]
    assert kinds[0] == "search_started" and kinds[-1] == "search_finished"
    # the official evaluation comes only after the last search iteration
    last_iteration = max((i for i, k in enumerate(kinds) if k in {"search_iteration", "judgement"}), default=0)
    assert min(i for i, k in enumerate(kinds) if k == "official_evaluation") > last_iteration
    assert (result.run_dir / "final_workflow.json").is_file()


def test_evolve_command_prints_each_iteration(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "LITELLM_LOCAL_MODEL_COST_MAP": "True", "TRELLIS_VAR_DIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, "manage.py", "evolve", "examples/diabetes-progression", "--search",
                           "mimosa", "--iterations", "2", "--seed", "1"], cwd=ROOT, capture_output=True, text=True,
                          env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.count("iter ") >= 2 and "budget left" in out and "checks 5/5" in out
    assert ("ACCEPTED" in out) or ("rejected" in out)
    assert "initial " in out and "final " in out and "official r2" in out


def test_evolve_archives_its_final_workflow_and_the_same_task_then_warm_starts(tmp_path, examples):
    archive = tmp_path / "archive"
    log = open(tmp_path / "log", "w")
    first = evolve(examples / "diabetes-progression", "mimosa", iterations=1, seed=1, runs_dir=tmp_path,
                   out=log, archive_dir=archive)
    assert first.start["path"] == "de_novo" and first.start["similarity"] is None
    second = evolve(examples / "diabetes-progression", "mimosa", iterations=1, seed=1, runs_dir=tmp_path,
                    out=log, archive_dir=archive)
    assert second.start["path"] == "warm_start" and second.start["similarity"] > 0.7
    assert second.initial["workflow_hash"] == first.final["workflow_hash"]
    other = evolve(examples / "discontinuous-1d", "mimosa", iterations=0, seed=1, runs_dir=tmp_path,
                   out=log, archive_dir=archive)
    assert other.start["path"] == "de_novo" and other.start["similarity"] < 0.7


def test_evolve_with_the_tree_scores_root_and_champion_officially_after_the_search(tmp_path, examples):
    result = evolve(examples / "discontinuous-1d", "tree", iterations=1, seed=1, runs_dir=tmp_path,
                    out=open(tmp_path / "log", "w"))
    i, f = result.initial["official"], result.final["official"]
    assert i["ok"] and f["ok"] and i["metric"] == "relative_l2"
    assert result.final["validation"] <= result.initial["validation"]


def test_evolve_scimars_prints_each_editor_and_the_decision(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "LITELLM_LOCAL_MODEL_COST_MAP": "True", "TRELLIS_VAR_DIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, "manage.py", "evolve", "examples/diabetes-progression", "--search",
                           "scimars", "--iterations", "1", "--no-archive"], cwd=ROOT, capture_output=True,
                          text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr
    for editor in ("role_editor", "coordination_editor", "memory_editor"):
        assert editor in proc.stdout
    assert "round  1" in proc.stdout and "decision: " in proc.stdout and "official r2" in proc.stdout
