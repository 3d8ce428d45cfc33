"""Hostile programs on the Docker sandbox's warm path (issue 29).

A warm container is started before its program is known, so its inputs cannot be bind-mounted
read-only: they are copied in and protected by ownership instead (root's, read-only, in sticky
folders), the program is handed over by a waiter that execs it, and containers of the same limits
wait side by side. Each attack here is on what that could have weakened: the inputs, what the
waiter might leave open, the next program's container, the outputs. Every program is served by a
warm container (the helper checks it). Skipped where Docker cannot run (failed instead when
TRELLIS_REQUIRE_DOCKER=1) or the engine is not root (then there is no warm path)."""
from __future__ import annotations

import hashlib
import os
import shutil
import textwrap
from pathlib import Path

import pytest

from engine.sandbox import ExecutionLimits, ExecutionRequest, UnsafeOutput
from tests.integration.test_docker_executor import host_processes_named

pytestmark = [
    pytest.mark.skipif(os.uname().sysname != "Linux", reason="the sandbox is Linux-only"),
    pytest.mark.skipif(os.geteuid() != 0, reason="the warm pool is only used by an engine running as root"),
]

TRAIN = b"x,y\n1,2\n3,4\n"
NOTES = b"notes\n"


@pytest.fixture(scope="module")
def executor(docker_image, tmp_path_factory):
    from engine.sandbox.docker_executor import DockerExecutor

    ex = DockerExecutor(tmp_path_factory.mktemp("warm-sandboxes"), warm=2)
    yield ex
    ex.close()
    shutil.rmtree(ex.root, ignore_errors=True)


@pytest.fixture
def task_files(tmp_path) -> dict[str, Path]:
    data = tmp_path / "train.csv"
    data.write_bytes(TRAIN)
    folder = tmp_path / "more"
    folder.mkdir()
    (folder / "notes.txt").write_bytes(NOTES)
    os.chmod(folder / "notes.txt", 0o600)  # only its owner may read it: the copy must still be readable
    return {"data/train.csv": data, "more": folder}


def run(executor, code: str, inputs: dict | None = None, **limits):
    """The program, in a container of the pool that was started before it was asked for."""
    limits.setdefault("wall_seconds", 60)
    request = ExecutionRequest(code=textwrap.dedent(code), input_files=inputs or {}, limits=ExecutionLimits(**limits))
    executor.prewarm(request.limits)
    assert executor.pool.settle() and executor.pool.ready_slots()
    hits = executor.pool.hits
    result = executor.run(request)
    assert executor.pool.hits == hits + 1, "not served by a warm container"
    return result


def attempts(result) -> dict[str, str]:
    """The program's 'name: outcome' lines."""
    return dict(line.split(": ", 1) for line in result.stdout.splitlines() if ": " in line)


def test_inputs_cannot_be_deleted_renamed_overwritten_or_chmodded(executor, task_files):
    result = run(executor, """
        import hashlib, os, shutil

        def attempt(name, action):
            try:
                action()
                print(name + ": done")
            except OSError as exc:
                print(name + ": refused", exc.errno)

        open("mine.txt", "w").write("replacement")
        attempt("remove", lambda: os.remove("data/train.csv"))
        attempt("rename", lambda: os.rename("data/train.csv", "stolen.csv"))
        attempt("replace", lambda: os.replace("mine.txt", "data/train.csv"))
        attempt("overwrite", lambda: open("data/train.csv", "w").write("forged"))
        attempt("append", lambda: open("data/train.csv", "a").write("forged"))
        attempt("truncate", lambda: os.truncate("data/train.csv", 0))
        attempt("chmod", lambda: os.chmod("data/train.csv", 0o666))
        attempt("chown", lambda: os.chown("data/train.csv", os.getuid(), os.getgid()))
        attempt("rename folder", lambda: os.rename("data", "old-data"))
        attempt("remove folder", lambda: shutil.rmtree("more"))
        attempt("add to folder", lambda: open("more/new.txt", "w").write("new"))
        attempt("folder mkdir", lambda: os.mkdir("more/sub"))
        attempt("chmod folder", lambda: os.chmod("more", 0o777))
        attempt("chmod workdir", lambda: os.chmod(".", 0o700))
        attempt("beside an input", lambda: open("data/extra.csv", "w").write("mine"))
        print("train:", hashlib.sha256(open("data/train.csv", "rb").read()).hexdigest())
        print("notes:", hashlib.sha256(open("more/notes.txt", "rb").read()).hexdigest())
    """, inputs=task_files)
    assert result.status == "ok", result.stderr
    said = attempts(result)
    refused = ("remove", "rename", "replace", "overwrite", "append", "truncate", "chmod", "chown", "rename folder",
               "remove folder", "add to folder", "folder mkdir", "chmod folder", "chmod workdir")
    assert {name: said[name].split()[0] for name in refused} == {name: "refused" for name in refused}, said
    assert said["beside an input"] == "done"  # as on the cold path: the folder around an input is the program's
    assert said["train"] == hashlib.sha256(TRAIN).hexdigest() and said["notes"] == hashlib.sha256(NOTES).hexdigest()
    assert task_files["data/train.csv"].read_bytes() == TRAIN
    assert (task_files["more"] / "notes.txt").read_bytes() == NOTES
    assert set(result.files) == {"mine.txt", "data/extra.csv"}


def test_inputs_cannot_be_changed_through_ctypes(executor, task_files):
    """Around the audit hook, straight to the kernel."""
    result = run(executor, """
        import ctypes, hashlib, os
        libc = ctypes.CDLL(None, use_errno=True)
        open("mine.txt", "w").write("replacement")
        calls = {
            "unlink": lambda: libc.unlink(b"data/train.csv"),
            "rename": lambda: libc.rename(b"data/train.csv", b"stolen.csv"),
            "replace": lambda: libc.rename(b"mine.txt", b"data/train.csv"),
            "open for writing": lambda: libc.open(b"data/train.csv", os.O_WRONLY | os.O_TRUNC),
            "truncate": lambda: libc.truncate(b"data/train.csv", ctypes.c_long(0)),
            "chmod": lambda: libc.chmod(b"data/train.csv", 0o666),
            "chown": lambda: libc.chown(b"data/train.csv", os.getuid(), os.getgid()),
            "hard link": lambda: libc.link(b"data/train.csv", b"linked.csv"),
            "create in folder": lambda: libc.open(b"more/new.txt", os.O_WRONLY | os.O_CREAT, 0o644),
            "rmdir folder": lambda: libc.rmdir(b"more"),
            "rename parent": lambda: libc.rename(b"data", b"old-data"),
        }
        for name, call in calls.items():
            print(name + ":", call(), ctypes.get_errno())
        print("train:", hashlib.sha256(open("data/train.csv", "rb").read()).hexdigest())
    """, inputs=task_files)
    assert result.status == "ok", result.stderr
    said = attempts(result)
    for name in ("unlink", "rename", "replace", "open for writing", "truncate", "chmod", "chown",
                 "create in folder", "rmdir folder", "rename parent"):
        assert said[name].split()[0] == "-1", (name, said[name])
    assert said["train"] == hashlib.sha256(TRAIN).hexdigest()
    assert task_files["data/train.csv"].read_bytes() == TRAIN
    # A hard link to a file the program may not write is refused where the kernel protects hard
    # links (the usual setting); where it does not, the link is root's read-only input all the same.
    linked = said["hard link"].split()[0] != "-1"
    assert not (linked and Path("/proc/sys/fs/protected_hardlinks").read_text().strip() == "1")
    assert set(result.files) == {"mine.txt"} | ({"linked.csv"} if linked else set())


def test_nothing_of_the_waiter_is_left_to_the_program(executor):
    """The hand-over's FIFO and configuration are gone, no descriptor of the waiter stays open,
    and the program is tini's child under the slot's own unprivileged uid, as on the cold path."""
    result = run(executor, """
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        print("private:", sorted(os.listdir(".tmp")))
        targets = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                targets.append(os.readlink(f"/proc/self/fd/{fd}"))
            except OSError:
                pass  # listdir's own, closed by now
        print("fds:", sorted(targets))
        print("open go:", libc.open(b"/work/.tmp/.trellis_go", os.O_WRONLY | os.O_NONBLOCK), ctypes.get_errno())
        print("ids:", os.getuid(), os.getgid(), os.getppid())
    """)
    assert result.status == "ok", result.stderr
    said = attempts(result)
    assert said["private"] == "[]"
    assert ".trellis" not in said["fds"] and "config" not in said["fds"], said["fds"]
    assert said["open go"] == "-1 2"  # ENOENT
    uid, gid, parent = map(int, said["ids"].split())
    assert uid >= 1000 and gid >= 1000 and parent == 1


def test_a_background_process_cannot_reach_the_next_program(executor):
    """A forked process that outlives its program keeps writing where the next program's files
    would be; the next program's container was already waiting while it ran (two ready)."""
    executor.prewarm(ExecutionLimits(wall_seconds=60))
    assert executor.pool.settle()
    first = run(executor, """
        import ctypes, os, time
        libc = ctypes.CDLL(None, use_errno=True)
        pid = libc.fork()  # around the audit hook
        if pid == 0:
            libc.prctl(15, b"trellis-planter", 0, 0, 0)  # PR_SET_NAME: looked for from the host
            for _ in range(600):
                for path in (b"/work/planted.csv", b"/work/.tmp/.trellis_config.json", b"/tmp/planted.csv"):
                    fd = libc.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                    if fd >= 0:
                        os.write(fd, b"planted")
                        os.close(fd)
                time.sleep(0.05)
            os._exit(0)
        time.sleep(0.3)
        print("planter:", pid)
    """)
    assert first.ok, first.stderr
    assert not host_processes_named("trellis-planter")  # it died with its container

    second = run(executor, """
        import os, time
        time.sleep(0.5)
        print("workdir:", sorted(os.listdir(".")), "private:", sorted(os.listdir(".tmp")))
        open("predictions.csv", "w").write("id,y\\n1,2\\n")
    """)
    assert second.ok, second.stderr
    assert attempts(second)["workdir"] == "['.tmp', '.trellis_bootstrap.py', 'main.py'] private: []"
    assert second.files == {"predictions.csv": hashlib.sha256(b"id,y\n1,2\n").hexdigest()}
    assert second.read_file("predictions.csv") == b"id,y\n1,2\n"
    assert "planted.csv" in first.files  # the first program's own folder was its only reach

    executor.pool.settle()
    waiting = {slot.container_id for slot in executor.pool.ready_slots()}
    labels = [f"{name}={value}" for name, value in executor.labels.items()]
    listed = executor.client.api.containers(all=True, filters={"label": labels})
    assert {c["Id"] for c in listed} == waiting  # nothing but containers still waiting for a program


def test_outputs_that_are_links_are_never_read(executor, task_files):
    result = run(executor, """
        import os
        os.symlink("data/train.csv", "to-input.csv")
        os.symlink("/etc/passwd", "passwd.csv")
        os.symlink("data", "linked-folder")
        os.makedirs("out")
        os.symlink("/etc/passwd", "out/predictions.csv")
        open("real.csv", "w").write("mine")
    """, inputs=task_files)
    assert result.status == "ok", result.stderr
    assert set(result.files) == {"real.csv"}
    for name in ("to-input.csv", "passwd.csv", "linked-folder/train.csv", "out/predictions.csv"):
        with pytest.raises((UnsafeOutput, FileNotFoundError)):
            result.read_file(name)
    assert task_files["data/train.csv"].read_bytes() == TRAIN


def test_the_warm_folder_holds_the_disk_cap_of_its_limits(executor):
    """A warm folder is made before its program: it must be sized to that program's limits."""
    result = run(executor, """
        import os
        fd = os.open("big.bin", os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            os.posix_fallocate(fd, 0, 300 * 1024 * 1024)
            print("reserved:", os.fstat(fd).st_blocks * 512)
        except OSError as exc:
            print("refused:", exc.errno)
    """, max_disk_mb=40, max_file_mb=2000)
    assert attempts(result).get("refused") == "28", result.stdout + result.stderr  # ENOSPC, from the kernel
