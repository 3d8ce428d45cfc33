"""Issue 9.1 (Redis side) and 9.5: the studio survives losing Redis or its Celery worker, the
embedded Redis is locked down, and a decision made moot by a resume is closed.

Before: the embedded Redis took any client on its socket, with no password, and let it
``CONFIG SET dir`` + ``SAVE`` a root-owned file anywhere; ``kill -9`` of redis-server went
unnoticed (``/healthz`` stayed ok, a new run 500ed and stayed "queued", resume 500ed then 409ed
until a restart); ``kill -9`` of the Celery main process stopped the whole studio; a proposal
still pending when its run resumed past it stayed pending forever, and "approve" changed nothing.

These drive the real studio (tests/studio_harness.py): embedded Redis, a Celery worker and
Daphne, supervised as ``manage.py studio`` supervises them. Select them with ``-k faults``."""
from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import time

import pytest
import redis
from django.test import Client

from tests.studio_harness import add_member, wait_for
from webapp import embedded_redis
from webapp.runs import controls
from webapp.runs.editing import apply_edit
from webapp.runs.models import GatePolicy, MutationStatus, Run, RunStatus
from webapp.tasks import registration
from webapp.teams.models import Project

pytestmark = [pytest.mark.slow]
db = pytest.mark.django_db(transaction=True)
NOBODY = 65534


@pytest.fixture
def supervised(studio, transactional_db):
    """The studio with its supervisor running (as in ``manage.py studio``), stopped again before
    the test's database is emptied; the studio is healthy again afterwards for the next tests."""
    studio.supervisor_log.clear()
    studio.supervise()
    yield studio
    studio.wait_healthy()
    studio.unsupervise()


@pytest.fixture
def reviewer(transactional_db):
    from django.contrib.auth import get_user_model

    return get_user_model().objects.create_user("grace", password="hopper-1906")


def _start(light_task, user=None, **options) -> Run:
    project = Project.objects.create(name="Fault tests")
    if user:
        add_member(project, user, "reviewer")
    task = registration.task_for_folder(project, light_task)
    # the single-agent baseline is the browser test's to show; here it would only add a run
    return controls.start_run(task, **{"single_agent": False, **options})


def _run(pk: int) -> Run:
    return Run.objects.get(pk=pk)


def _events(run: Run) -> list[tuple]:
    return list(run.events.order_by("seq").values_list("seq", "kind", "agent", "source_seq"))


def _assert_nothing_lost(run: Run, before: list[tuple]) -> None:
    after = _events(run)
    assert after[:len(before)] == before, "events recorded before the fault changed or vanished"
    assert [e[0] for e in after] == list(range(1, len(after) + 1)), "event numbers are not contiguous"


def _client(user) -> Client:
    c = Client()
    c.force_login(user)
    return c


# --- 1. the embedded Redis is locked down ----------------------------------------------------

def test_faults_embedded_redis_refuses_strangers_and_dangerous_commands(studio, tmp_path):
    var = studio.var_dir
    home, sock, pw_file = var / "redis", embedded_redis.socket_path(var), var / "redis" / "password"
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert stat.S_IMODE(sock.stat().st_mode) == 0o600
    assert stat.S_IMODE(pw_file.stat().st_mode) == 0o600
    password = pw_file.read_text().strip()
    assert len(password) >= 32
    # The password reaches redis-server on stdin: `ps` shows no secret.
    assert password not in (open(f"/proc/{studio.redis.pid}/cmdline").read())

    # Without the password (or with a wrong one) nothing is accepted, not even a read.
    for pw in (None, "guess"):
        stranger = redis.Redis(unix_socket_path=str(sock), password=pw, socket_timeout=2)
        with pytest.raises(redis.exceptions.RedisError):
            stranger.execute_command("PING")
        with pytest.raises(redis.exceptions.RedisError):
            stranger.execute_command("LLEN", "runs")

    # With it, the commands that write files, load code or change the server are gone.
    r = redis.Redis(unix_socket_path=str(sock), password=password, socket_timeout=2)
    assert r.ping()
    target = tmp_path / "planted"
    for command in (["CONFIG", "SET", "dir", str(tmp_path)], ["CONFIG", "SET", "dbfilename", "planted"],
                    ["CONFIG", "GET", "*"], ["SAVE"], ["BGSAVE"], ["BGREWRITEAOF"], ["DEBUG", "SLEEP", "0"],
                    ["MODULE", "LOAD", "/tmp/x.so"], ["ACL", "SETUSER", "default", "nopass"], ["FLUSHALL"],
                    ["REPLICAOF", "127.0.0.1", "1"], ["SHUTDOWN", "NOSAVE"], ["MONITOR"]):
        with pytest.raises(redis.exceptions.ResponseError, match="unknown command"):
            r.execute_command(*command)
    assert not target.exists() and r.ping()  # and the server is still up

    # Another uid cannot even reach the socket (nor read the password).
    python = shutil.which("python3", path="/usr/bin:/bin")
    if os.geteuid() != 0 or not python:
        pytest.skip("needs root to run a client as another uid")
    probe = ("import socket, sys\n"
             "s = socket.socket(socket.AF_UNIX)\n"
             "try:\n    s.connect(sys.argv[1])\nexcept OSError as e:\n    print(type(e).__name__); sys.exit(3)\n"
             "s.sendall(b'PING\\r\\n'); print(s.recv(100)); sys.exit(0)\n")
    out = subprocess.run([python, "-c", probe, str(sock)], user=NOBODY, group=NOBODY, capture_output=True,
                         text=True, timeout=30, cwd="/")
    assert out.returncode == 3 and "PermissionError" in out.stdout, out.stdout + out.stderr
    read = subprocess.run([python, "-c", "import sys; print(open(sys.argv[1]).read())", str(pw_file)],
                          user=NOBODY, group=NOBODY, capture_output=True, text=True, timeout=30, cwd="/")
    assert read.returncode != 0 and password not in read.stdout


# --- 2. kill -9 of redis-server ----------------------------------------------------------------

@db
def test_faults_redis_killed_is_noticed_restarted_and_runs_go_on(supervised, examples, light_task, reviewer):
    studio = supervised
    client = _client(reviewer)
    run = _start(light_task, reviewer, search="mimosa", iterations=1, gate_policy=GatePolicy.AUTOMATIC)
    wait_for(lambda: _run(run.pk).status == RunStatus.RUNNING and run.events.count() > 3, 180,
             what="the run to be executing")

    # Redis dies while nobody restarts it yet: the health check says so, and starting or
    # resuming a run is a clear 503, never a 500 and never a run stuck "queued".
    studio.unsupervise()
    before = _events(run)
    os.kill(studio.redis.pid, signal.SIGKILL)
    studio.redis.proc.wait(10)
    code, health = studio.health()
    assert code == 503 and health["redis"] == "error" and health["database"] == "ok" and not health["ok"]
    page = client.post("/runs/new", {"project": "Fault tests", "task_folder": str(examples / "discontinuous-1d"),
                                     "search": "mimosa", "iterations": 1, "gate_policy": "automatic", "seed": 0,
                                     "max_tokens": 200_000, "model": ""})
    assert page.status_code == 503 and b"could not be queued" in page.content
    stranded = Run.objects.exclude(pk=run.pk).get()
    assert stranded.status == RunStatus.INTERRUPTED and stranded.can_resume
    assert "Redis" in stranded.status_reason

    # The supervisor brings it back on the same socket with the same password.
    killed_at = time.monotonic()
    studio.supervise()
    wait_for(lambda: studio.redis.running() and studio.redis.restarts >= 1, 30, what="Redis to be restarted")
    studio.wait_healthy(60)
    assert time.monotonic() - killed_at < 60

    # Resume works without restarting the studio, and the run that was executing finishes.
    assert client.post(f"/runs/{stranded.pk}/control/resume").status_code == 200
    wait_for(lambda: _run(stranded.pk).events.exists(), 180, what="the resumed run to start")
    controls.cancel_run(_run(stranded.pk))  # it has shown it runs; no need to wait for all of it
    run = wait_for(lambda: (r := _run(run.pk)).status in {"completed", "failed", "cancelled"} and r, 400,
                   what="the run that was executing to finish")
    assert run.status == RunStatus.COMPLETED, run.status_reason
    assert run.attempts == 1  # it kept going through the outage: no resume was needed
    _assert_nothing_lost(run, before)


# --- 3. kill -9 of the Celery main process -----------------------------------------------------

@db
def test_faults_celery_main_process_killed_restarts_the_worker_not_the_studio(supervised, light_task, reviewer):
    studio = supervised
    run = _start(light_task, reviewer, search="mimosa", iterations=2, gate_policy=GatePolicy.AUTOMATIC)
    wait_for(lambda: (_run(run.pk).checkpoint or {}).get("n", -1) >= 1, 400, what="iteration 1 to be persisted")
    wait_for(lambda: run.events.filter(kind="agent_started", iteration=2).exists(), 200, what="iteration 2 to start")
    old_pid = studio.worker.pid
    before = _events(run)
    os.kill(old_pid, signal.SIGKILL)  # the main process only, as `kill -9 <pid>` does

    # The web server keeps answering throughout; the supervisor starts a new worker.
    deadline = time.monotonic() + 120
    while not (studio.worker.pid != old_pid and studio.worker.alive()):
        assert studio.health()[0] in (200, 503), "the web server stopped answering"
        assert time.monotonic() < deadline, "the worker was not restarted"
        time.sleep(0.2)
    studio.wait_healthy(120)
    assert any("worker exited" in line for line in studio.supervisor_log)

    # The run it was executing resumes from its checkpoint by itself and finishes, nothing lost.
    run = wait_for(lambda: (r := _run(run.pk)).status in {"completed", "failed", "cancelled"} and r, 500,
                   what=f"run {run.pk} to finish after the worker restart")
    assert run.status == RunStatus.COMPLETED, run.status_reason
    assert run.attempts == 2
    started = list(run.events.filter(kind="search_started").values_list("payload__resumed_after", flat=True))
    assert started == [None, 1]
    _assert_nothing_lost(run, before)


# --- 4. a stale pending decision ---------------------------------------------------------------

@db
def test_faults_a_proposal_made_moot_by_a_resume_is_closed_and_approving_it_changes_nothing(studio, light_task,
                                                                                             reviewer):
    run = _start(light_task, reviewer, search="mimosa", iterations=3, gate_policy=GatePolicy.MANUAL)
    stale = wait_for(lambda: run.mutations.filter(status=MutationStatus.PROPOSED).first(), 400,
                     what="a mutation to wait for a person")
    # The person pauses the run instead of deciding, edits the workflow themselves, and resumes:
    # that iteration now probes their edit, and the engine's proposal is never made again.
    controls.pause_run(_run(run.pk))
    wait_for(lambda: _run(run.pk).status == RunStatus.PAUSED, 120, what="the pause")
    assert _run(run.pk).mutations.get(pk=stale.pk).status == MutationStatus.PROPOSED
    agent = run.current_version.data["agents"][0]["id"]
    apply_edit(_run(run.pk), "prompt", {"agent": agent, "prompt": "Be brief and state every assumption."}, "grace")
    controls.resume_run(_run(run.pk))

    def closed():
        stale.refresh_from_db()
        return stale.status != MutationStatus.PROPOSED and stale

    wait_for(closed, 400, what="the stale proposal to be closed")
    assert stale.status == MutationStatus.CLOSED and stale.decided_by == "studio"
    assert stale.reason == f"the run resumed from iteration {stale.iteration - 1}; this proposal was not re-proposed"

    # Approving it afterwards is refused and changes nothing; the page says it was closed.
    versions = list(run.versions.values_list("number", "hash"))
    page = _client(reviewer).post(f"/mutations/{stale.pk}/approve", {"reason": "late"})
    assert b"closed without a decision" in page.content and stale.reason.encode() in page.content
    stale.refresh_from_db()
    assert stale.status == MutationStatus.CLOSED and stale.reason.startswith("the run resumed")
    assert list(run.versions.values_list("number", "hash")) == versions
    assert stale.child_hash not in {h for _, h in versions}
    controls.cancel_run(_run(run.pk))
    wait_for(lambda: _run(run.pk).status == RunStatus.CANCELLED, 200, what="the cancel")
    # Cancelling closes whatever was still waiting too: nothing is left pending on an ended run.
    assert not run.mutations.filter(status=MutationStatus.PROPOSED).exists()
