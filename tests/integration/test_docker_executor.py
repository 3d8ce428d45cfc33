"""The Docker executor against a real daemon: what a program can and cannot do in its container,
and that every container is gone afterwards. Skipped where Docker cannot run (failed instead when
TRELLIS_REQUIRE_DOCKER=1, as in CI). The attacks of tests/adversarial/test_sandbox_escapes.py
run against this executor too."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from engine.sandbox import ExecutionLimits, ExecutionRequest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def executor(docker_image, tmp_path_factory):
    from engine.sandbox.docker_executor import DockerExecutor

    ex = DockerExecutor(tmp_path_factory.mktemp("docker-sandboxes"))
    yield ex
    shutil.rmtree(ex.root, ignore_errors=True)


def run(executor, code: str, inputs: dict | None = None, **limits):
    limits.setdefault("wall_seconds", 60)
    return executor.run(ExecutionRequest(code=textwrap.dedent(code), input_files=inputs or {},
                                         limits=ExecutionLimits(**limits)))


def containers_of(executor) -> list:
    from engine.sandbox.docker_executor import LABEL

    return executor.client.api.containers(all=True, filters={"label": f"{LABEL}={executor.owner}"})


def test_a_program_runs_and_its_container_is_gone(executor):
    result = run(executor, "print('hello from the container')")
    assert result.status == "ok", result.stderr
    assert result.stdout == "hello from the container\n"
    assert result.executor == "docker" and result.evidence()["executor"] == "docker"
    assert containers_of(executor) == []


def test_inputs_are_read_only_and_outputs_are_hashed(executor, tmp_path):
    data = tmp_path / "train.csv"
    data.write_text("x,y\n1,2\n")
    folder = tmp_path / "more"
    folder.mkdir()
    (folder / "notes.txt").write_text("notes\n")
    result = run(executor, """
        import hashlib, os
        print("read", open("data/train.csv").read().splitlines()[1])
        for path in ("data/train.csv", "more/notes.txt", "more/new.txt"):
            try:
                open(path, "a").write("tampered")
                print("wrote", path)
            except OSError as exc:
                print("refused", path, exc.errno)
        try:
            os.remove("data/train.csv")
            print("removed input")
        except OSError:
            pass
        open("predictions.csv", "w").write("id,y\\n0,2.0\\n")
        os.makedirs("out", exist_ok=True)
        open("out/model.txt", "w").write("weights")
    """, inputs={"data/train.csv": data, "more": folder})
    assert result.status == "ok", result.stderr
    assert "read 1,2" in result.stdout
    assert "wrote" not in result.stdout and "removed input" not in result.stdout
    assert result.stdout.count("refused") == 3, result.stdout
    assert data.read_text() == "x,y\n1,2\n"  # the task's own file, untouched
    import hashlib

    assert result.files == {"predictions.csv": hashlib.sha256(b"id,y\n0,2.0\n").hexdigest(),
                            "out/model.txt": hashlib.sha256(b"weights").hexdigest()}
    assert result.read_file("predictions.csv") == b"id,y\n0,2.0\n"


def test_the_wall_clock_kills_a_program_that_runs_too_long(executor):
    started = time.monotonic()
    result = run(executor, "import time\nprint('sleeping', flush=True)\ntime.sleep(60)", wall_seconds=2)
    assert result.status == "timeout"
    assert "sleeping" in result.stdout and "wall-clock limit of 2 s" in result.stderr
    assert time.monotonic() - started < 10
    assert containers_of(executor) == []


def test_memory_is_capped(executor):
    result = run(executor, """
        block = bytearray(600 * 1024 * 1024)
        for i in range(0, len(block), 4096):
            block[i] = 1
        print("survived")
    """, memory_mb=200)
    assert result.status == "memory", result.stdout + result.stderr
    assert "survived" not in result.stdout
    assert "memory limit of 200 MB" in result.stderr


def test_there_is_no_network(executor):
    """ctypes around the audit hook: only a downed-or-loopback interface exists, nothing routes."""
    result = run(executor, """
        import ctypes, os, struct
        names = [line.split(":")[0].strip() for line in open("/proc/self/net/dev").read().splitlines()[2:]]
        print("interfaces", sorted(names))
        libc = ctypes.CDLL(None, use_errno=True)
        fd = libc.socket(2, 1, 0)  # AF_INET: the bootstrap's seccomp filter refuses it
        print("socket", fd)
        if fd >= 0:
            addr = struct.pack("!HH4s8x", 2, 80, bytes([1, 1, 1, 1]))
            print("connect", libc.connect(fd, addr, len(addr)))
    """)
    assert "socket -1" in result.stdout or "connect -1" in result.stdout, result.stdout + result.stderr
    assert "interfaces ['lo']" in result.stdout, result.stdout


def test_nothing_outside_the_working_directory_can_be_written(executor):
    result = run(executor, """
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        for path in (b"/etc/evil", b"/usr/lib/evil.so", b"/evil", b"/work/../evil"):
            fd = libc.open(path, 0o101, 0o644)  # O_WRONLY | O_CREAT, around the audit hook
            print(path.decode(), "fd", fd, "errno", ctypes.get_errno())
        open("mine.txt", "w").write("ok")
    """)
    assert result.status == "ok", result.stderr
    assert result.stdout.count("fd -1") == 4, result.stdout
    assert result.files.keys() == {"mine.txt"}


def test_a_fork_bomb_is_contained(executor):
    started = time.monotonic()
    result = run(executor, """
        import ctypes, os, threading, time
        libc = ctypes.CDLL(None, use_errno=True)
        forked = 0
        for _ in range(10_000):
            pid = libc.fork()
            if pid == 0:
                time.sleep(30)
                os._exit(0)
            if pid < 0:
                break
            forked += 1
        print("forked", forked, flush=True)
    """, max_processes=40)
    assert int(result.stdout.split("forked")[1]) < 40, result.stdout
    assert time.monotonic() - started < 20  # the sleeping children died with the container
    assert containers_of(executor) == []


def test_programs_run_as_a_user_of_their_own_without_privileges(executor):
    result = run(executor, """
        import os
        status = dict(line.split(":", 1) for line in open("/proc/self/status"))
        print("uid", os.getuid(), "gid", os.getgid())
        print("caps", status["CapEff"].strip(), "bounding", status["CapBnd"].strip())
        print("nonewprivs", status["NoNewPrivs"].strip())
    """)
    assert result.status == "ok", result.stderr
    uid = int(result.stdout.split("uid ")[1].split()[0])
    assert uid >= 1000
    assert "caps 0000000000000000 bounding 0000000000000000" in result.stdout
    assert "nonewprivs 1" in result.stdout


def test_an_interrupted_engine_leaves_no_container(executor):
    def interrupt(_workdir):
        raise KeyboardInterrupt  # Ctrl-C while the program runs

    request = ExecutionRequest(code="import time\ntime.sleep(30)", watch=interrupt,
                               limits=ExecutionLimits(wall_seconds=60))
    with pytest.raises(KeyboardInterrupt):
        executor.run(request)
    assert containers_of(executor) == []


def test_a_watcher_stops_the_program(executor):
    calls = []

    def stop_on_second_look(workdir: Path) -> bool:
        calls.append(workdir)
        return len(calls) >= 2

    request = ExecutionRequest(code="import time\ntime.sleep(30)", watch=stop_on_second_look,
                               limits=ExecutionLimits(wall_seconds=60))
    result = executor.run(request)
    assert result.status == "killed" and "stopped on request" in result.stderr
    assert result.duration_s < 10


def test_containers_of_a_killed_engine_are_removed_by_the_next(executor, docker_image):
    from engine.sandbox.docker_executor import LABEL, DockerExecutor

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a pid that no longer runs: an engine killed outright
    import socket

    orphan = executor.client.containers.create(docker_image, command=["sleep", "60"], network_mode="none",
                                               labels={LABEL: f"{socket.gethostname()}:{gone.pid}"})
    DockerExecutor(executor.root)
    assert executor.client.api.containers(all=True, filters={"id": orphan.id}) == []


def test_auto_says_when_the_image_is_not_built(tmp_path, monkeypatch, docker_image):
    from engine.sandbox import docker_executor, select

    monkeypatch.delenv("TRELLIS_EXECUTOR", raising=False)
    monkeypatch.setattr(docker_executor, "image_ref", lambda: "trellis-sandbox:not-built-here")
    choice = select.make_executor("auto", tmp_path)
    assert choice.kind == "subprocess"
    assert "trellis-sandbox:not-built-here is not built: run `python -m engine.sandbox.image build`" in choice.reason
    with pytest.raises(select.ExecutorUnavailable, match="is not built"):
        select.make_executor("docker", tmp_path)


def test_run_task_with_the_docker_executor_completes(docker_image, tmp_path, light_task):
    from engine.cli import main

    runs = tmp_path / "runs"
    code = main(["run", str(light_task), "--executor", "docker", "--runs-dir", str(runs), "--no-single-agent"])
    assert code == 0
    trace = next(runs.glob("*/trace.jsonl"))
    events = [json.loads(line) for line in trace.read_text().splitlines()]
    started = next(e for e in events if e["kind"] == "run_started")["payload"]
    assert started["executor"] == "docker" and docker_image in started["executor_reason"]
    executions = [e["payload"] for e in events if e["kind"] == "code_execution"]
    assert executions and all(p["executor"] == "docker" for p in executions)
    assert next(e for e in events if e["kind"] == "run_finished")["payload"]["status"] == "completed"
