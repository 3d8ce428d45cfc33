"""The command a scientist types: python manage.py run_task examples/<task>."""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _manage(*args, tmp_path):
    env = {"PATH": "/usr/bin:/bin", "LITELLM_LOCAL_MODEL_COST_MAP": "True", "TRELLIS_VAR_DIR": str(tmp_path)}
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, capture_output=True, text=True,
                          env=env, timeout=600)


@pytest.mark.slow
def test_run_task_prints_live_steps_and_the_evaluate_py_metric(tmp_path):
    proc = _manage("run_task", "examples/discontinuous-1d", "--seed", "7", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for agent in ("analyzer", "planner", "coder", "verifier", "finalizer"):
        assert f"] {agent}" in out
    assert "ran code (candidate solution): ok" in out
    assert "metric     relative_l2 = " in out and "computed by evaluate.py" in out
    trace = Path(out.split("trace      ")[1].split()[0])
    assert trace.is_file() and trace.is_relative_to(tmp_path)
    # beside it, the single agent on the same budget, scored by the same evaluate.py
    assert re.search(r"single +completed, \d+ tokens", out), out
    assert re.search(r"baselines +constant [\d.]+ · nearest neighbour [\d.]+ · single agent [\d.]+", out), out
    assert re.search(r"lead over constant: \+[\d.e-]+, 95 % \[\+[\d.e-]+, \+[\d.e-]+\]: better beyond", out), out


def test_run_task_on_a_broken_folder_names_the_file(tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "Problem.md").write_text("no title here\n")
    proc = _manage("run_task", str(broken), tmp_path=tmp_path)
    assert proc.returncode != 0
    assert "Problem.md: must start with a title line" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.slow  # a whole CLI process: Django, litellm and the engine start in it
def test_a_too_small_budget_is_reported_not_crashed(tmp_path):
    proc = _manage("run_task", "examples/diabetes-progression", "--max-calls", "1", tmp_path=tmp_path)
    assert proc.returncode != 0
    assert "call budget exhausted" in proc.stdout
    assert "status: stopped" in proc.stdout


@pytest.mark.slow  # a whole CLI process: Django, litellm and the engine start in it
def test_an_unreachable_real_model_fails_the_run_with_a_clear_reason(tmp_path):
    proc = _manage("run_task", "examples/discontinuous-1d", "--model", "openai/gpt-4o-mini", tmp_path=tmp_path)
    assert proc.returncode != 0
    # no key here: the run stops at its first call with the provider's own words, in one line
    assert "openai/gpt-4o-mini is unavailable" in proc.stderr and "OPENAI_API_KEY" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert "analyzer     finished FAILURE" in proc.stdout
    # issue 37 item 15: such a run printed no summary and wrote no summary.json
    assert "status: failed" in proc.stdout and "cost       " in proc.stdout
    summary = json.loads(Path(proc.stdout.split("trace      ")[1].split()[0]).with_name("summary.json").read_text())
    assert summary["status"] == "failed" and "unavailable" in summary["reason"]


def test_user_list_on_a_fresh_var_folder_sets_the_database_up_instead_of_a_traceback(tmp_path):
    proc = _manage("user", "list", tmp_path=tmp_path)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert "no accounts yet" in proc.stdout


def test_the_demo_command_sets_up_its_database_on_a_fresh_checkout(tmp_path):
    fresh = tmp_path / "not-yet-created"
    proc = _manage("migrate", "--noinput", "-v", "0", tmp_path=fresh)
    assert proc.returncode == 0, proc.stderr
    assert (fresh / "trellis.sqlite3").is_file()


@pytest.mark.slow
def test_studio_command_starts_everything_with_a_live_demo_run_and_stops_cleanly(tmp_path):
    """The README's first command: embedded Redis, a worker, the web server, a demo run."""
    import json
    import os
    import signal
    import time
    import urllib.request

    from tests.studio_harness import free_port, wait_for

    port = free_port()
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "TRELLIS_VAR_DIR": str(tmp_path)}
    env.pop("TRELLIS_DB_PATH", None)
    log = (tmp_path / "studio.log").open("w+")
    proc = subprocess.Popen([sys.executable, "manage.py", "studio", "--port", str(port), "--workers", "1"], cwd=ROOT,
                            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out = wait_for(lambda: "demo run:" in (text := (tmp_path / "studio.log").read_text()) and text, 120,
                       what="the studio to print its URL")
        assert f"Trellis studio: http://127.0.0.1:{port}/" in out and "sign in as 'demo'" in out
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
            assert json.load(r)["ok"] is True
        db = tmp_path / "trellis.sqlite3"

        def demo_status():
            import sqlite3

            with sqlite3.connect(db) as c:
                row = c.execute("select status, last_seq from runs_run order by id limit 1").fetchone()
            return row if row and row[0] in ("running", "awaiting_decision") and row[1] > 0 else None

        wait_for(demo_status, 180, what="the demo run to be executing in the worker")
    finally:
        os.killpg(proc.pid, signal.SIGTERM) if proc.poll() is None else None
        proc.wait(60)
    time.sleep(1)
    leftovers = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True).stdout.split()
    assert not leftovers, f"processes left running: {leftovers}"
