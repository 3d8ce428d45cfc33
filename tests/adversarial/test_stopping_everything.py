"""Issue 37, item 8: started without a terminal (``setsid nohup``), SIGINT to the studio's group and
SIGTERM left the studio and its Redis running past 60 s (a background job inherits SIGINT
ignored), and the parts it had started kept executing a run after the studio was killed. Every
way of stopping now stops everything the studio started. A real ``manage.py studio`` each time."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from tests.studio_harness import free_port

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _start(tmp_path: Path) -> tuple[subprocess.Popen, list[psutil.Process]]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRELLIS_")}
    env.update(TRELLIS_VAR_DIR=str(tmp_path / "var"), LITELLM_LOCAL_MODEL_COST_MAP="True",
               TRELLIS_MCP_CONFIG="none", TRELLIS_EXECUTOR="subprocess")

    def detached() -> None:  # as `setsid nohup ... &` from a script: no terminal, SIGINT and SIGHUP ignored
        os.setsid()
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    log = (tmp_path / "studio.log").open("wb")
    studio = subprocess.Popen([sys.executable, "manage.py", "studio", "--no-demo", "--port", str(port),
                               "--web-processes", "1"], cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                              stdout=log, stderr=subprocess.STDOUT, preexec_fn=detached)
    deadline = time.monotonic() + 120
    while True:
        assert studio.poll() is None, (tmp_path / "studio.log").read_text()[-3000:]
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as answer:
                if answer.status == 200:
                    break
        except OSError:
            pass
        assert time.monotonic() < deadline, "the studio did not become healthy"
        time.sleep(0.5)
    parts = psutil.Process(studio.pid).children(recursive=True)
    names = " ".join(" ".join(p.cmdline()) for p in parts)
    assert "redis-server" in names and "celery" in names and "daphne" in names
    return studio, parts


def _all_gone(parts: list[psutil.Process], seconds: float) -> list[str]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        alive = [p for p in parts if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        if not alive:
            return []
        time.sleep(0.3)
    return [" ".join(p.cmdline())[:120] for p in alive]


@pytest.mark.parametrize("how", ["SIGINT to the group", "SIGKILL"])
def test_every_way_of_stopping_stops_everything_it_started(tmp_path, how):
    studio, parts = _start(tmp_path)
    try:
        if how == "SIGKILL":
            studio.kill()
        else:
            os.killpg(studio.pid, signal.SIGINT)
        studio.wait(40)
        left = _all_gone(parts, 30)
        assert not left, f"still running after {how}: {left}"
    finally:
        for p in parts + [psutil.Process(studio.pid)] if studio.poll() is None else parts:
            try:
                p.kill()
            except psutil.Error:
                pass
