"""Keeps the embedded studio's parts alive: the embedded Redis, the Celery worker and the web
server. Used by ``manage.py studio`` (in its main loop) and by the test harness (in a thread).

- redis-server died (or stopped answering three pings in a row): a fresh one on the same socket
  with the same password; then ``on_restart("redis")`` re-creates the queues and re-sends the
  queued runs whose messages were in Redis's memory. Executing runs keep going: their worker
  reconnects to the broker by itself, and their events are database rows first.
- a child's main process died: its whole process group is killed (a Celery worker's pool
  processes and their programs), it is started again, then ``on_restart(name)`` (for the worker:
  the runs it was executing resume from their checkpoints).
- a part that keeps dying (``MAX_RESTARTS`` within ``WINDOW_S``) is not restarted again:
  ``GaveUp`` says which, and the studio stops instead of looping.
"""
from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections import deque
from pathlib import Path
from typing import Callable

from webapp.embedded_redis import EmbeddedRedis
from webapp.process_life import dying_with_parent

MAX_RESTARTS = 5
WINDOW_S = 60.0
PING_FAILURES = 3  # consecutive unanswered pings of a live redis-server before it counts as hung


class GaveUp(RuntimeError):
    """A part of the studio kept dying; restarting it again would only loop."""


class Child:
    """A child process in a process group of its own, so that a kill reaches everything it
    started (a Celery worker's pool processes, their sandboxed programs).

    ``death_signal``: sent to the child when the studio dies (SIGQUIT for a Celery worker: its cold
    shutdown ends its pool processes and the runs they execute at once); None: it outlives it."""

    def __init__(self, name: str, argv: list[str], env: dict, cwd: Path, log: Path | None = None,
                 pass_fds: tuple[int, ...] = (), death_signal: int | None = None):
        self.name, self.argv, self.env, self.cwd, self.log = name, argv, env, cwd, log
        self.pass_fds = pass_fds  # e.g. the listening socket the web processes share
        self.death_signal = death_signal
        self.proc: subprocess.Popen | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def start(self) -> "Child":
        out = self.log.open("ab") if self.log else None
        try:
            self.proc = subprocess.Popen(self.argv, cwd=self.cwd, env=self.env, stdout=out,
                                         stderr=subprocess.STDOUT if out else None, start_new_session=True,
                                         pass_fds=self.pass_fds,
                                         preexec_fn=dying_with_parent(self.death_signal) if self.death_signal else None)
        finally:
            if out:
                out.close()
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill_group(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def stop(self, timeout_s: float = 15.0) -> None:
        """SIGTERM to the main process (a Celery worker's warm shutdown leaves its runs to be
        resumed by the next start), then SIGKILL to whatever of the group is left."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                pass
        self.kill_group(signal.SIGKILL)  # whatever of the group is left (pool processes, programs)
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            pass


def stop_children(children: list[Child], timeout_s: float = 10.0, say: Callable[[str], None] = print,
                  grace: dict[str, float] | None = None, why: dict[str, str] | None = None) -> None:
    """Stop every child together (SIGTERM to all at once, then SIGKILL to the groups of those
    still up at their deadline), saying what is waited on. One at a time, each child's wait added
    to the next: stopping a studio with a run in flight took 18-19 s, silently.
    ``grace``: a shorter wait for some (the worker, when a run it executes cannot finish anyway);
    ``why``: what a name is busy with, said while it is waited on."""
    grace, why = grace or {}, why or {}
    started = time.monotonic()
    going = [c for c in children if c.alive()]
    for child in going:
        try:
            child.proc.terminate()
        except ProcessLookupError:
            pass
    deadline = {c.name: started + min(timeout_s, grace.get(c.name, timeout_s)) for c in going}
    said = 0.0
    while True:
        now = time.monotonic()
        pending = [c for c in going if c.proc.poll() is None]
        for child in pending:
            if now >= deadline[child.name]:
                say(f"{child.name} did not stop in {deadline[child.name] - started:.0f} s: killed")
                child.kill_group(signal.SIGKILL)
        pending = [c for c in pending if now < deadline[c.name]]
        if not pending:
            break
        if now - said >= 2.0:
            say("stopping: waiting for " + ", ".join(
                f"{c.name} ({why[c.name]})" if c.name in why else c.name for c in pending)
                + f", at most {max(deadline[c.name] for c in pending) - now:.0f} s more")
            said = now
        time.sleep(0.1)
    for child in children:  # whatever each group left (pool processes, programs), and reap
        child.kill_group(signal.SIGKILL)
        if child.proc is not None:
            try:
                child.proc.wait(5)
            except subprocess.TimeoutExpired:
                say(f"{child.name} (pid {child.proc.pid}) did not exit after SIGKILL")


class Supervisor:
    def __init__(self, children: list[Child], redis: EmbeddedRedis | None = None,
                 on_restart: Callable[[str], None] = lambda name: None, say: Callable[[str], None] = print):
        self.children = children
        self.redis = redis
        self.on_restart = on_restart
        self.say = say
        self.restarts: dict[str, deque] = {}
        self.unanswered = 0
        self.lock = threading.Lock()  # one check at a time (the harness's thread, a test's call)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def child(self, name: str) -> Child:
        return next(c for c in self.children if c.name == name)

    # --- one pass ---------------------------------------------------------------------------
    def check(self) -> list[str]:
        """Restart whatever died; returns the names restarted. Raises GaveUp."""
        with self.lock:
            restarted = []
            if self.redis is not None and self._redis_down():
                self._note("redis")
                self.say("embedded Redis stopped answering; restarting it on the same socket")
                try:
                    self.redis.restart()
                except RuntimeError as exc:  # tried again on the next pass, up to MAX_RESTARTS
                    self.say(str(exc))
                else:
                    self.unanswered = 0
                    restarted.append("redis")
                    self._after("redis")
            for child in self.children:
                if child.alive():
                    continue
                code = child.proc.returncode if child.proc else None
                self._note(child.name)
                self.say(f"{child.name} exited ({code}); restarting it")
                child.kill_group()
                child.start()
                restarted.append(child.name)
                self._after(child.name)
            return restarted

    def _redis_down(self) -> bool:
        if self.redis.proc is not None and not self.redis.running():
            return True  # ours, and gone; a server another studio started is only pinged
        if self.redis.ping(timeout_s=1.0):
            self.unanswered = 0
            return False
        self.unanswered += 1
        return self.unanswered >= PING_FAILURES

    def _note(self, name: str) -> None:
        times = self.restarts.setdefault(name, deque())
        now = time.monotonic()
        while times and now - times[0] > WINDOW_S:
            times.popleft()
        if len(times) >= MAX_RESTARTS:
            raise GaveUp(f"{name} died {len(times) + 1} times within {WINDOW_S:.0f}s; not restarting it again")
        times.append(now)

    def _after(self, name: str) -> None:
        try:
            self.on_restart(name)
        except Exception as exc:  # noqa: BLE001 - a failed follow-up must not stop the supervision
            self.say(f"after restarting {name}: {type(exc).__name__}: {exc}")

    # --- in a thread (the test harness) -------------------------------------------------------
    def start_thread(self, interval_s: float = 0.5) -> "Supervisor":
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, args=(interval_s,), name="trellis-supervisor", daemon=True)
        self._thread.start()
        return self

    def _loop(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            try:
                self.check()
            except GaveUp as exc:
                self.say(str(exc))
                return

    def stop_thread(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(30)
            self._thread = None
