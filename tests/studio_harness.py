"""A real studio for integration and browser tests: the embedded Redis, Celery worker
processes and a Daphne web server, all on the pytest-django test database (a file)."""
from __future__ import annotations

import json
import os
import socket
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIVE: list["Studio"] = []  # the studios running now: a failing test shows the tails of their logs (conftest.py)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def studio_environment(var_dir: Path, db_path: Path) -> dict[str, str]:
    """This process's environment, pointed at a studio of its own under ``var_dir``: the
    embedded Redis and a SQLite file, nothing shared with another studio."""
    env = {**os.environ, "TRELLIS_VAR_DIR": str(var_dir), "TRELLIS_DB_PATH": str(db_path),
           "DJANGO_SETTINGS_MODULE": "webapp.settings", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
           "PYTHONUNBUFFERED": "1",
           # a lost last message noticed after a quiet second, not three: the tests wait less
           "TRELLIS_LIVE_SYNC_S": os.environ.get("TRELLIS_LIVE_SYNC_S", "1")}
    # PYTEST_XDIST_WORKER: the studio's processes use var_dir as given, not a test worker's own.
    for name in ("TRELLIS_REDIS_URL", "DATABASE_URL", "PYTEST_XDIST_WORKER"):
        env.pop(name, None)
    return env


def use_studio_environment(var_dir: Path, db_path: Path) -> None:
    """Point this process (and what it starts) at a studio of its own (for benchmarks)."""
    os.environ.clear()
    os.environ.update(studio_environment(var_dir, db_path))


class Studio:
    def __init__(self, var_dir: Path, db_path: Path):
        self.var_dir = Path(var_dir)
        self.db_path = Path(db_path)
        self.env = studio_environment(self.var_dir, self.db_path)
        self.redis = None  # webapp.embedded_redis.EmbeddedRedis
        self.worker = None  # webapp.supervisor.Child
        self.training = None  # the training queue's worker, when a test starts one
        self.web = None      # the (first) web process
        self.webs = []       # all of them
        self.listener = None  # the socket they accept on
        self.supervisor = None
        self.supervisor_log: list[str] = []
        self.port = 0
        self.logs = self.var_dir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, web: bool = True, worker: bool = True, web_processes: int = 1) -> "Studio":
        from webapp.embedded_redis import EmbeddedRedis

        LIVE.append(self)
        self.redis = EmbeddedRedis(self.var_dir).start()
        if worker:
            self.start_worker()
        if web:
            # As ``manage.py studio`` serves: Daphne process(es) on one listening socket of its own.
            from webapp.runs.management.commands.studio import web_listener, web_servers

            self.listener = web_listener("127.0.0.1", 0)
            self.port = self.listener.getsockname()[1]
            self.webs = [child.start() for child in web_servers(self.env, self.listener, web_processes, self.logs)]
            self.web = self.webs[0]
            self._wait_http(self.url + "/healthz")
            if worker:
                self.wait_healthy()
        return self

    def start_worker(self) -> None:
        from webapp.supervisor import Child

        if self.worker is None:
            # Its own process group (Child), so that a kill reaches the worker's pool children too.
            self.worker = Child("worker", [sys.executable, "-m", "celery", "-A", "webapp", "worker", "-Q",
                                           "runs,celery", "-c", "2", "--loglevel", "INFO", "-n",
                                           f"test-{time.monotonic_ns()}@%h"], self.env, ROOT, self.logs / "worker.log")
        self.worker.start()

    def start_training_worker(self, processes: int = 1) -> None:
        """The training queue's worker, as ``manage.py studio`` starts it; the runs see its
        slots (webapp/health.py) within a second of it being ready."""
        from webapp.health import live_training_slots
        from webapp.runs.management.commands.studio import training_worker

        if self.training is None:
            self.training = training_worker(self.env, processes)
            self.training.argv[self.training.argv.index("-n") + 1] = f"training-{time.monotonic_ns()}@%h"
            self.training.argv[self.training.argv.index("--loglevel") + 1] = "INFO"
            self.training.log = self.logs / "training.log"
        self.training.start()
        wait_for(lambda: live_training_slots() >= processes, 60, what=f"the training worker (see {self.logs})")

    def stop_training_worker(self) -> None:
        if self.training is not None:
            self.training.stop(15)
            self.training = None

    def training_pool_pids(self) -> list[int]:
        """The training worker's pool processes (the ones that run jobs)."""
        if self.training is None or not self.training.alive():
            return []
        pid = self.training.pid
        try:
            return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
        except OSError:
            return []

    def kill_worker(self) -> None:
        """kill -9 the worker and every process it started: nothing gets to clean up."""
        if self.worker and self.worker.alive():
            self.worker.kill_group()
            self.worker.proc.wait(10)

    def supervise(self, interval_s: float = 0.3):
        """What ``manage.py studio`` does in its main loop, here in a thread: restart a dead
        Redis or worker (or web server) and recover the runs they were carrying."""
        from webapp.runs import controls
        from webapp.supervisor import Supervisor

        def on_restart(part: str) -> None:
            try:
                controls.after_restart(part)
            finally:
                from django.db import connection

                connection.close()  # this thread's own connection to the test database

        def say(text: str) -> None:
            self.supervisor_log.append(text)
            with (self.logs / "supervisor.log").open("a") as f:
                f.write(f"{time.strftime('%H:%M:%S')} {text}\n")

        self.supervisor = Supervisor([c for c in (self.worker, *self.webs) if c], self.redis, on_restart, say)
        return self.supervisor.start_thread(interval_s)

    def unsupervise(self) -> None:
        if self.supervisor:
            self.supervisor.stop_thread()
            self.supervisor = None

    def health(self) -> tuple[int, dict]:
        """(HTTP status, body) of /healthz; (0, {}) when the web server does not answer."""
        try:
            with urllib.request.urlopen(self.url + "/healthz", timeout=5) as r:
                return r.status, json.load(r)
        except urllib.error.HTTPError as exc:
            return exc.code, json.load(exc)
        except OSError:
            return 0, {}

    def wait_healthy(self, timeout: float = 120) -> dict:
        return wait_for(lambda: (h := self.health())[0] == 200 and h[1], timeout, interval=0.2,
                        what=f"/healthz to be ok (see {self.logs})")

    def _wait_http(self, url: str, timeout: float = 60) -> None:
        """Until the web server answers at all (a 503 from /healthz is an answer)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(url, timeout=2):
                    return
            except urllib.error.HTTPError:
                return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"{url} did not answer; see {self.logs}")

    def log_tails(self, lines: int = 40) -> str:
        """The last lines of each of its processes' logs: what a test that timed out was waiting on."""
        parts = []
        for log in sorted(self.logs.glob("*.log")):
            try:
                tail = log.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:]
            except OSError:
                continue
            parts.append(f"--- {log.name} (last {len(tail)} lines)\n" + "\n".join(tail))
        return "\n".join(parts)

    def stop(self) -> None:
        if self in LIVE:
            LIVE.remove(self)
        self.unsupervise()
        from webapp.supervisor import stop_children

        stop_children([c for c in (*self.webs, self.worker, self.training) if c], 15, say=lambda text: None)
        import tempfile

        from engine.sandbox.capped_folder import unmount_orphans

        for root in (self.var_dir, Path(tempfile.gettempdir())):  # the killed worker's programs' folders
            unmount_orphans(root, anywhere_below=True)
        if self.listener:
            self.listener.close()
        if self.redis:
            self.redis.stop()


def wait_for(predicate, timeout: float = 120, interval: float = 0.3, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def running_run(task_folder: Path, project_name: str):
    """A Run row that a worker is executing, with its initial workflow recorded: the starting
    point of the page tests, with no worker or Redis behind it."""
    from engine.synthesis import team_workflow
    from engine.task import load_task
    from webapp.runs.bridge import record_version
    from webapp.runs.models import Run, RunStatus
    from webapp.tasks.models import Task
    from webapp.teams.models import Project

    spec = load_task(task_folder)
    task = Task.objects.create(project=Project.objects.create(name=project_name), name=spec.name,
                               folder=str(task_folder))
    run = Run.objects.create(task=task, status=RunStatus.RUNNING, lease="L", search="mimosa")
    record_version(run, team_workflow(spec).to_dict(), "engine", "initial", 0)
    return run


def add_member(project, user, role: str = "owner"):
    """Make ``user`` (a User or a username) a member of ``project``: since runs have owners,
    a person sees and acts on a project's runs only as one of its members."""
    from django.contrib.auth import get_user_model

    from webapp.teams.models import Membership, Role

    if isinstance(user, str):
        user = get_user_model().objects.get(username=user)
    row, _ = Membership.objects.update_or_create(project=project, user=user, defaults={"role": Role[role.upper()]})
    return row


def proposed_mutation(run, n: int = 1, key: str = "c" * 64, **fields):
    """A Mutation row waiting for a person, holding a typed gate Proposal like the engine's."""
    from engine.protocol.gate import Change, Evidence, Proposal
    from webapp.runs.models import Mutation

    wf = run.current_version.data if run.current_version else {}
    proposal = Proposal(search=run.search, n=n, key=key, change=Change(kind="prompt_refinement", target="coder"),
                        rule_accepts=True, rule="J improved", evidence=Evidence(basis="judge", J=0.8, incumbent_J=0.7),
                        parent=wf.get("hash", ""), workflow=wf or None)
    return Mutation.objects.create(run=run, iteration=n, kind="prompt_refinement", target="coder", child_hash=key,
                                   child=wf, parent_hash=wf.get("hash", ""),
                                   proposal=proposal.model_dump(mode="json"), **fields)
