"""The Docker executor against a real daemon: what a program can and cannot do in its container,
and that every container is gone afterwards. Skipped where Docker cannot run (failed instead when
TRELLIS_REQUIRE_DOCKER=1, as in CI). The attacks of tests/adversarial/test_sandbox_escapes.py
run against this executor too.

Each test runs twice: on the cold path (a container created for the program, TRELLIS_SANDBOX_WARM=0)
and on the warm one (a container of the warm pool, started before the program was asked for; the
run helper makes sure one is ready and that it served the program)."""
from __future__ import annotations

import gc
import hashlib
import json
import os
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
# The warm path needs an engine that may give the inputs to root (it does in CI and here).
WARM = pytest.param("warm", marks=pytest.mark.skipif(os.geteuid() != 0, reason="the warm pool needs root"))


@pytest.fixture(scope="module", params=["cold", WARM])
def executor(request, docker_image, tmp_path_factory):
    from engine.sandbox.docker_executor import DockerExecutor

    ex = DockerExecutor(tmp_path_factory.mktemp(f"docker-sandboxes-{request.param}"),
                        warm=1 if request.param == "warm" else 0)
    yield ex
    ex.close()
    shutil.rmtree(ex.root, ignore_errors=True)


@pytest.fixture
def warm_executor(docker_image, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("the warm pool needs root")
    from engine.sandbox.docker_executor import DockerExecutor

    ex = DockerExecutor(tmp_path / "sandboxes", warm=1)
    yield ex
    ex.close()


def run(executor, code: str, inputs: dict | None = None, **limits):
    limits.setdefault("wall_seconds", 60)
    request = ExecutionRequest(code=textwrap.dedent(code), input_files=inputs or {}, limits=ExecutionLimits(**limits))
    return run_request(executor, request)


def run_request(executor, request: ExecutionRequest):
    """``executor.run``; on the warm path a container for the request's limits is made ready first
    and the program must have been served by it."""
    if not executor.pool.size:
        return executor.run(request)
    executor.prewarm(request.limits)
    assert executor.pool.settle() and executor.pool.ready_slots()
    hits = executor.pool.hits
    try:
        return executor.run(request)
    finally:
        assert executor.pool.hits == hits + 1


def containers_of(executor, waiting_too: bool = False) -> list:
    """The executor's containers but its warm ones waiting for a program (unless ``waiting_too``),
    once the removals it handed to its pool's threads are done."""
    executor.pool.settle()
    waiting = set() if waiting_too else {slot.container_id for slot in executor.pool.ready_slots()}
    labels = [f"{name}={value}" for name, value in executor.labels.items()]
    listed = executor.client.api.containers(all=True, filters={"label": labels})
    return [c for c in listed if c["Id"] not in waiting]


def mounts_under(root: Path) -> list[str]:
    with open("/proc/self/mountinfo") as fh:
        return [line.split()[4] for line in fh if line.split()[4].startswith(str(root.resolve()) + "/")]


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
        run_request(executor, request)
    assert containers_of(executor) == []


def test_a_watcher_stops_the_program(executor):
    calls = []

    def stop_on_second_look(workdir: Path) -> bool:
        calls.append(workdir)
        return len(calls) >= 2

    request = ExecutionRequest(code="import time\ntime.sleep(30)", watch=stop_on_second_look,
                               limits=ExecutionLimits(wall_seconds=60))
    result = run_request(executor, request)
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


# ------------------------------------------------------------------- the warm pool

def test_a_second_request_with_the_same_limits_is_served_by_a_warm_container(warm_executor):
    ex = warm_executor
    code = textwrap.dedent("""
        import os
        ticks = int(open("/proc/self/stat").read().rsplit(")", 1)[1].split()[19])
        print("process created", ticks / os.sysconf("SC_CLK_TCK"))  # seconds since boot
    """)
    request = ExecutionRequest(code=code, limits=ExecutionLimits(wall_seconds=60))
    asked_first = time.clock_gettime(time.CLOCK_BOOTTIME)
    first = ex.run(request)
    assert first.ok, first.stderr
    assert (ex.pool.hits, ex.pool.misses) == (0, 1)
    assert float(first.stdout.split("process created")[1]) >= asked_first - 0.02  # cold: made for it
    assert ex.pool.settle() and len(ex.pool.ready_slots()) == 1  # made behind the first request
    waiting = ex.pool.ready_slots()[0].container_id
    time.sleep(1.0)

    asked = time.clock_gettime(time.CLOCK_BOOTTIME)
    second = ex.run(request)
    assert second.ok, second.stderr
    assert second.executor == "docker" and (ex.pool.hits, ex.pool.misses) == (1, 1)
    # the program's very process was started (as the container's waiter) before it was asked for
    assert float(second.stdout.split("process created")[1]) < asked - 0.5
    assert second.duration_s < 5
    assert ex.pool.settle()
    assert ex.client.api.containers(all=True, filters={"id": waiting}) == []  # used once, removed
    assert [slot.container_id for slot in ex.pool.ready_slots()] != [waiting]

    other = ex.run(ExecutionRequest(code=code, limits=ExecutionLimits(wall_seconds=60, memory_mb=300)))
    assert other.ok and (ex.pool.hits, ex.pool.misses) == (1, 2)  # other container limits: cold


def test_two_programs_never_share_a_container(warm_executor):
    ex = warm_executor
    first = run_request(ex, ExecutionRequest(code=textwrap.dedent("""
        import ctypes, os, time
        open(".tmp/secret.txt", "w").write("first")  # its private folder (TMPDIR)
        open("mine.txt", "w").write("first")
        libc = ctypes.CDLL(None, use_errno=True)
        pid = libc.fork()  # around the audit hook
        if pid == 0:
            libc.prctl(15, b"trellis-leftovr", 0, 0, 0)  # PR_SET_NAME, to be looked for from the host
            time.sleep(60)
            os._exit(0)
        print("left running", pid, "own", os.getpid())
    """), limits=ExecutionLimits(wall_seconds=60)))
    assert first.ok, first.stderr
    assert "left running" in first.stdout
    assert not host_processes_named("trellis-leftovr")  # gone with its container

    second = run_request(ex, ExecutionRequest(code=textwrap.dedent("""
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        print("private", sorted(os.listdir(".tmp")), "workdir", sorted(os.listdir(".")))
        seen = []
        for pid in range(1, 4000):  # every process of this container answers signal 0 (or EPERM)
            if libc.kill(pid, 0) == 0 or ctypes.get_errno() != 3:  # 3: ESRCH, no such process
                seen.append(pid)
        print("processes", seen, "own", os.getpid())
    """), limits=ExecutionLimits(wall_seconds=60)))
    assert second.ok, second.stderr
    assert "private [] workdir ['.tmp', '.trellis_bootstrap.py', 'main.py']" in second.stdout
    own = int(second.stdout.split("own")[-1])
    assert f"processes {sorted({1, own})}" in second.stdout  # tini and itself, nothing of the first
    assert first.files.keys() == {"mine.txt"} and second.files == {}


def test_close_removes_every_warm_container_and_mount(docker_image, tmp_path):
    from engine.sandbox.docker_executor import DockerExecutor

    ex = DockerExecutor(tmp_path / "sandboxes", warm=2)
    result = run(ex, "open('out.txt', 'w').write('kept')")
    assert result.ok and ex.pool.settle()
    assert len(ex.pool.ready_slots()) == 2 and len(mounts_under(ex.root)) == 2
    ex.close()
    assert containers_of(ex, waiting_too=True) == []
    assert mounts_under(ex.root) == [] and not list(ex.root.glob("*.disk"))
    assert [p for p in ex.root.iterdir()] == [result.workdir]  # the program's kept outputs alone
    assert result.read_file("out.txt") == b"kept"

    hits = ex.pool.hits
    after = ex.run(ExecutionRequest(code="print('cold')", limits=ExecutionLimits(wall_seconds=60)))
    assert after.ok and ex.pool.hits == hits and ex.pool.ready_slots() == []  # closed: cold, no refill
    assert containers_of(ex, waiting_too=True) == []


def test_an_executor_dropped_without_close_leaves_nothing(docker_image, tmp_path):
    from engine.sandbox.docker_executor import DockerExecutor
    from engine.sandbox.image import docker_client

    root = tmp_path / "sandboxes"

    def use_and_drop() -> list[str]:
        ex = DockerExecutor(root, warm=1, keep=False)
        assert ex.run(ExecutionRequest(code="print(1)", limits=ExecutionLimits(wall_seconds=60))).ok
        assert ex.pool.settle() and ex.pool.ready_slots()
        return [f"{name}={value}" for name, value in ex.labels.items()]

    labels = use_and_drop()
    gc.collect()
    assert docker_client().api.containers(all=True, filters={"label": labels}) == []
    assert mounts_under(root) == [] and list(root.iterdir()) == []


def test_an_idle_warm_container_is_removed(warm_executor):
    ex = warm_executor
    ex.pool.idle_seconds = 0.5
    assert run(ex, "print(1)").ok
    assert ex.pool.settle() and len(ex.pool.ready_slots()) == 1
    waiting = ex.pool.ready_slots()[0].container_id
    time.sleep(1.5)
    assert ex.pool.settle() and ex.pool.ready_slots() == []
    assert ex.client.api.containers(all=True, filters={"id": waiting}) == []
    assert mounts_under(ex.root) == []


def test_trellis_sandbox_warm_0_turns_the_pool_off(docker_image, tmp_path, monkeypatch):
    from engine.sandbox.docker_executor import DockerExecutor

    monkeypatch.setenv("TRELLIS_SANDBOX_WARM", "0")
    ex = DockerExecutor(tmp_path / "sandboxes")
    for _ in range(2):
        assert run(ex, "print(1)").ok
    assert ex.pool.size == 0 and ex.pool.hits == 0 and ex.pool.ready_slots() == []
    assert containers_of(ex) == [] and mounts_under(ex.root) == []
    monkeypatch.delenv("TRELLIS_SANDBOX_WARM")
    assert DockerExecutor(tmp_path / "other").pool.size == (2 if os.geteuid() == 0 else 0)


def host_processes_named(name: str) -> list[int]:
    """Pids of this machine's processes of that name (what a program forked, seen from the host)."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and open(f"/proc/{entry}/comm").read().strip() == name:
                found.append(int(entry))
        except OSError:
            pass
    return found
