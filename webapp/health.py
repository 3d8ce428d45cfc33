"""Is the studio whole? The database, Redis (broker and channel layer) and at least one Celery
worker (and, told apart, the training workers' slots), each checked cheaply enough for
``/healthz`` to be polled every second.

A worker proves it is alive by refreshing its entry in one Redis sorted set
(``trellis:workers``: member = worker name, score = time) from a thread in its main process;
the web process only counts the fresh entries. No broadcast and no waiting on replies, so a
missing worker costs the health check nothing."""
from __future__ import annotations

import logging
import threading
import time

import redis
from django.conf import settings
from django.db import connections
from redis.backoff import NoBackoff
from redis.retry import Retry

from webapp import disk as data_disk

log = logging.getLogger(__name__)

WORKERS_KEY = "trellis:workers"
# Training workers (the ``training`` queue only) beat apart, as "<name>|<processes>": they run
# training jobs, not runs, so they are the studio's training slots and not its run workers.
TRAINING_KEY = "trellis:training-workers"
WORKER_BEAT_S = 1.0
WORKER_FRESH_S = 5.0  # a worker silent for longer than this is gone (or cut off from Redis)

_clients: dict[str, redis.Redis] = {}


def redis_client(timeout_s: float = 1.0) -> redis.Redis:
    """One small pool per process and URL; short timeouts so a dead Redis answers fast."""
    key = f"{settings.REDIS_URL}|{timeout_s}"
    if key not in _clients:
        # No retries: redis-py's default backoff would make a dead Redis take seconds to report.
        _clients[key] = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=timeout_s, socket_connect_timeout=timeout_s,
                                             max_connections=8, retry=Retry(NoBackoff(), 0))
    return _clients[key]


def database_ok() -> bool:
    try:
        with connections["default"].cursor() as cursor:
            cursor.execute("SELECT 1")
            return cursor.fetchone() == (1,)
    except Exception:  # noqa: BLE001 - any failure is "the database is down" to a health check
        log.warning("health: the database did not answer", exc_info=True)
        return False


def redis_ok() -> bool:
    try:
        return bool(redis_client().ping())
    except (redis.RedisError, OSError):
        return False


def live_workers(now: float | None = None) -> int:
    now = time.time() if now is None else now
    return int(redis_client().zcount(WORKERS_KEY, now - WORKER_FRESH_S, "+inf"))


def live_training_slots(now: float | None = None) -> int:
    """Training jobs the fresh training workers can run at once (0 when there is none)."""
    now = time.time() if now is None else now
    slots = 0
    for member in redis_client().zrangebyscore(TRAINING_KEY, now - WORKER_FRESH_S, "+inf"):
        name = member.decode() if isinstance(member, bytes) else str(member)
        count = name.rpartition("|")[2]
        slots += int(count) if count.isdigit() else 1
    return slots


def report() -> dict:
    """``{"database": "ok"|"error", "redis": "ok"|"error", "worker": "ok"|"none"|"unknown",
    "workers": n, "training": "ok"|"none"|"unknown", "training_slots": n, "disk": "ok"|"full",
    "disk_free_mb": n, "ok": bool}``; nothing
    in it is a secret (no URL, no path). Training workers are optional (without one, training jobs
    run in the runs' worker), so they say where jobs will train but never make the studio unwell."""
    db = database_ok()
    rd = redis_ok()
    workers = slots = 0
    if rd:
        try:
            workers = live_workers()
            slots = live_training_slots()
        except (redis.RedisError, OSError):
            rd = False

    disk = data_disk.state()
    return {"database": "ok" if db else "error", "redis": "ok" if rd else "error",
            "worker": ("ok" if workers else "none") if rd else "unknown", "workers": workers,
            "training": ("ok" if slots else "none") if rd else "unknown", "training_slots": slots,
            "disk": "full" if disk.full else "ok", "disk_free_mb": disk.free_mb,
            "ok": db and rd and workers > 0 and not disk.full}


class WorkerBeat:
    """Runs in a Celery worker's main process (started on ``worker_ready``). A thread, not a
    Celery timer: it keeps beating while the consumer reconnects after a Redis restart, and it
    stops with the process, which is what the studio needs to know."""

    def __init__(self, name: str, key: str = WORKERS_KEY):
        self.name = name
        self.key = key
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="trellis-worker-beat", daemon=True)

    def start(self) -> "WorkerBeat":
        self.thread.start()
        return self

    def _loop(self) -> None:
        while not self.stop.is_set():
            try:
                client = redis_client()
                now = time.time()
                client.zadd(self.key, {self.name: now})
                client.zremrangebyscore(self.key, "-inf", now - 10 * WORKER_FRESH_S)  # long-gone workers
            except (redis.RedisError, OSError):
                pass  # Redis is down or restarting: the next beat tries again
            self.stop.wait(WORKER_BEAT_S)

    def close(self) -> None:
        self.stop.set()
        try:
            redis_client().zrem(self.key, self.name)  # a clean stop shows at once
        except (redis.RedisError, OSError):
            pass
