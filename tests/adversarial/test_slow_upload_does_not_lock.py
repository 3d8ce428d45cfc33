"""Issue 37, item 2: adding a task ran its checks (its evaluate.py, up to 30 s) inside a database
transaction; on SQLite that held the write lock, so another person's sign-in waited (29.6 s, or a
500 "database is locked") and a live run elsewhere failed. The checks now run before the
transaction: while a slow evaluate.py is being checked, others sign in and a run writes its events."""
from __future__ import annotations

import shutil
import threading
import time

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from engine.trace import Event as EngineEvent
from tests.conftest import EXAMPLES
from webapp.runs.bridge import RunEventSink
from webapp.runs.models import Event, Run, RunStatus
from webapp.tasks.models import Task
from webapp.teams.models import Project

pytestmark = pytest.mark.django_db(transaction=True)
SLOW_S = 6.0


@pytest.fixture
def slow_task(tmp_path, settings):
    settings.TRELLIS_TASK_ROOTS = [tmp_path]
    settings.TRELLIS_RUNS_DIR = tmp_path / "runs"
    folder = tmp_path / "slow-task"
    shutil.copytree(EXAMPLES / "discontinuous-1d", folder)
    evaluate = folder / "evaluate.py"
    lines = evaluate.read_text().splitlines(keepends=True)
    at = next(i + 1 for i, line in enumerate(lines) if line.startswith("from __future__")) \
        if any(line.startswith("from __future__") for line in lines) else 0
    lines.insert(at, f"import time\ntime.sleep({SLOW_S})\n")
    evaluate.write_text("".join(lines))
    return folder


def test_others_sign_in_and_a_run_writes_while_a_slow_task_is_checked(slow_task, demo_user):
    get_user_model().objects.create_user("grace", password="hopper-1906")
    other = Project.objects.create(name="Elsewhere")
    task = Task.objects.create(project=other, name="t", folder=str(EXAMPLES / "discontinuous-1d"))
    run = Run.objects.create(task=task, status=RunStatus.RUNNING, lease="L", search="mimosa")
    uploader = Client()
    uploader.force_login(demo_user)
    result: dict = {}

    def upload() -> None:
        result["page"] = uploader.post("/tasks/new", {"project": "Slow", "path": str(slow_task)})
        result["done"] = time.monotonic()

    thread = threading.Thread(target=upload)
    started = time.monotonic()
    thread.start()
    time.sleep(1.5)  # the upload is now running the slow evaluate.py
    signed_in = Client().post("/login/", {"username": "grace", "password": "hopper-1906"})
    sink = RunEventSink(run, "L")
    sink.emit(EngineEvent(run_id="r", seq=1, ts=time.time(), kind="agent_started", agent="coder", iteration=0,
                          payload={"roles": ["coder"], "inputs": []}))
    written = time.monotonic()
    thread.join(timeout=120)
    assert signed_in.status_code == 302, "a sign-in during the upload failed"
    assert Event.objects.filter(run=run).count() == 1
    # both happened while the upload was still checking, not after it let go of the database
    assert written < result["done"], "the sign-in and the event waited for the upload"
    assert result["done"] - started >= SLOW_S
    assert result["page"].status_code == 302, result["page"].content.decode()[-3000:]
    assert Task.objects.filter(project__name="Slow").exists()


def test_a_runs_events_wait_for_a_busy_database_instead_of_failing_the_run(monkeypatch):
    """Another process holding SQLite's write lock past the busy timeout made a live run end
    "failed: database is locked". Its event writes now wait and write again."""
    import sqlite3

    from django.db import connection

    from webapp.runs import bridge

    monkeypatch.setattr(bridge, "BUSY_WAITS_S", (0.3,) * 20)
    task = Task.objects.create(project=Project.objects.create(name="Busy"), name="t",
                               folder=str(EXAMPLES / "discontinuous-1d"))
    run = Run.objects.create(task=task, status=RunStatus.RUNNING, lease="L", search="mimosa")
    sink = RunEventSink(run, "L")
    connection.ensure_connection()
    connection.cursor().execute("PRAGMA busy_timeout = 100")  # SQLite's own wait, short for the test
    other = sqlite3.connect(str(connection.settings_dict["NAME"]), check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")  # another process's write lock, held for 2 s
    released = threading.Timer(2.0, other.commit)
    released.start()
    started = time.monotonic()
    sink.emit(EngineEvent(run_id="r", seq=1, ts=time.time(), kind="agent_started", agent="coder", iteration=0,
                          payload={"roles": ["coder"], "inputs": []}))
    released.join()
    other.close()
    assert time.monotonic() - started >= 1.5  # it did wait for the lock
    assert Event.objects.filter(run=run).count() == 1 and Run.objects.get(pk=run.pk).last_seq == 1
