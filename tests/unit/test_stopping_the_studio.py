"""Stopping the studio stops its children together and says what it waits on (issue 26 item 17).

The old studio stopped them one at a time, each with its own 10 s wait, silently: 18-19 s with a
run in flight, and nobody told why."""
from __future__ import annotations

import sys
import time
from pathlib import Path

from webapp.supervisor import Child, stop_children

STUBBORN = """
import signal, sys, time
def noted(*_):
    open(sys.argv[1], "w").write(repr(time.time()))
signal.signal(signal.SIGTERM, noted)
open(sys.argv[1] + ".up", "w").close()
while True:
    time.sleep(0.05)
"""


def _child(name: str, tmp_path: Path) -> Child:
    script = tmp_path / "stubborn.py"
    script.write_text(STUBBORN)
    child = Child(name, [sys.executable, str(script), str(tmp_path / name)], {}, tmp_path).start()
    deadline = time.monotonic() + 20
    while not (tmp_path / f"{name}.up").exists():
        assert time.monotonic() < deadline, f"{name} did not start"
        time.sleep(0.05)
    return child


def test_children_are_told_to_stop_together_and_killed_at_their_deadline_with_what_was_waited_on(tmp_path):
    worker, web = _child("worker", tmp_path), _child("web-1", tmp_path)
    said: list[str] = []
    stop_children([worker, web], timeout_s=4, say=said.append, why={"worker": "executing run(s) 7"})
    assert not worker.alive() and not web.alive()
    told = {name: float((tmp_path / name).read_text()) for name in ("worker", "web-1")}
    # one at a time, the second would be told only after the first's 4 s were spent
    assert abs(told["worker"] - told["web-1"]) < 2
    waiting = next(line for line in said if line.startswith("stopping: waiting for"))
    assert "worker (executing run(s) 7)" in waiting and "web-1" in waiting
    assert any("worker did not stop in 4 s: killed" in line for line in said)


def test_a_shorter_grace_for_the_worker_is_kept(tmp_path):
    worker, web = _child("worker", tmp_path), _child("web-1", tmp_path)
    said: list[str] = []
    stop_children([worker, web], timeout_s=6, say=said.append, grace={"worker": 1})
    assert any("worker did not stop in 1 s: killed" in line for line in said)
    assert any("web-1 did not stop in 6 s: killed" in line for line in said)


def test_children_that_stop_at_once_are_not_waited_on(tmp_path):
    quick = Child("web-1", [sys.executable, "-c", "import time; time.sleep(60)"], {}, tmp_path).start()
    said: list[str] = []
    stop_children([quick], timeout_s=10, say=said.append)
    assert not quick.alive() and not any("killed" in line for line in said)
