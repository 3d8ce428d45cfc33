"""A real studio for integration and browser tests: the embedded Redis, Celery worker
processes and a Daphne web server, all on the pytest-django test database (a file)."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Studio:
    def __init__(self, var_dir: Path, db_path: Path):
        self.var_dir = Path(var_dir)
        self.db_path = Path(db_path)
        self.env = {**os.environ, "TRELLIS_VAR_DIR": str(self.var_dir), "TRELLIS_DB_PATH": str(self.db_path),
                    "DJANGO_SETTINGS_MODULE": "webapp.settings", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                    "PYTHONUNBUFFERED": "1"}
        self.env.pop("TRELLIS_REDIS_URL", None)
        self.redis = None
        self.worker: subprocess.Popen | None = None
        self.web: subprocess.Popen | None = None
        self.port = 0
        self.logs = self.var_dir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, web: bool = True, worker: bool = True) -> "Studio":
        from webapp import embedded_redis

        self.redis = embedded_redis.start(self.var_dir / "redis.sock", self.var_dir / "redis")
        if worker:
            self.start_worker()
        if web:
            self.port = free_port()
            self.web = self._spawn("web", [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port),
                                           "webapp.asgi:application"])
            self._wait_http(self.url + "/healthz")
        return self

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen:
        log = (self.logs / f"{name}.log").open("ab")
        # Its own process group, so that a kill reaches the worker's pool children too.
        return subprocess.Popen(argv, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)

    def start_worker(self) -> None:
        self.worker = self._spawn("worker", [sys.executable, "-m", "celery", "-A", "webapp", "worker", "-Q",
                                             "runs,celery", "-c", "2", "--loglevel", "INFO", "-n",
                                             f"test-{time.monotonic_ns()}@%h"])

    def kill_worker(self) -> None:
        """kill -9 the worker and every process it started: nothing gets to clean up."""
        if self.worker and self.worker.poll() is None:
            os.killpg(self.worker.pid, signal.SIGKILL)
            self.worker.wait(10)

    def _wait_http(self, url: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"{url} did not answer; see {self.logs}")

    def stop(self) -> None:
        from webapp import embedded_redis

        for proc in (self.web, self.worker):
            if proc and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
        embedded_redis.stop(self.redis)


def wait_for(predicate, timeout: float = 120, interval: float = 0.3, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def add_member(project, user, role: str = "owner"):
    """Make ``user`` (a User or a username) a member of ``project``: since runs have owners,
    a person sees and acts on a project's runs only as one of its members."""
    from django.contrib.auth import get_user_model

    from webapp.runs.models import Membership, Role

    if isinstance(user, str):
        user = get_user_model().objects.get(username=user)
    row, _ = Membership.objects.update_or_create(project=project, user=user, defaults={"role": Role[role.upper()]})
    return row
