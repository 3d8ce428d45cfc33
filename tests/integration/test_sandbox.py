"""Tests for the subprocess sandbox executor (plain pytest, no Django)."""
from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import socket
import sys
import textwrap
import time
from pathlib import Path

import pytest

from engine.sandbox import ExecutionLimits, ExecutionRequest, ExecutionResult
from engine.sandbox.subprocess_executor import SubprocessExecutor, landlock_abi

PROJECT_ROOT = Path(__file__).resolve().parents[2]
PROJECT_SOURCE = PROJECT_ROOT / "engine" / "sandbox" / "__init__.py"


@pytest.fixture(scope="module")
def executor():
    ex = SubprocessExecutor()  # default root: a fresh temp dir
    yield ex
    shutil.rmtree(ex.root, ignore_errors=True)


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A file outside any workdir that sandboxed programs must not touch."""
    path = tmp_path / "victim.txt"
    path.write_text("original\n")
    return path


def run(executor: SubprocessExecutor, code: str, *, inputs=None, args=(), **limits) -> ExecutionResult:
    limits.setdefault("wall_seconds", 30)
    request = ExecutionRequest(code=textwrap.dedent(code), input_files=inputs or {},
                               limits=ExecutionLimits(**limits), args=tuple(args))
    return executor.run(request)


def layers(caplog) -> dict:
    """The confinement layers the last run reported (logged at DEBUG by the executor)."""
    for record in reversed(caplog.records):
        message = record.getMessage()
        if message.startswith("sandbox layers for"):
            return json.loads(message.split(": ", 1)[1])
    return {}


# ----------------------------------------------------------------- normal runs

def test_program_output_file_is_reported_with_its_sha256(executor):
    result = run(executor, """
        import tempfile
        print("hello from the sandbox")
        with open("result.txt", "w") as f:
            f.write("42\\n")
        with tempfile.NamedTemporaryFile(delete=False) as tmp:   # goes to .tmp/
            tmp.write(b"scratch")
        open("/dev/null", "w").write("discarded")
    """)
    assert result.status == "ok", result.stderr
    assert result.exit_code == 0
    assert result.violations == []
    assert "hello from the sandbox" in result.stdout
    produced = result.workdir / "result.txt"
    assert result.files == {"result.txt": hashlib.sha256(produced.read_bytes()).hexdigest()}
    assert result.files["result.txt"] == hashlib.sha256(b"42\n").hexdigest()
    assert result.executor == "subprocess"
    assert result.evidence()["status"] == "ok"


def test_crashing_program_is_an_error_with_traceback(executor):
    result = run(executor, """
        def compute():
            raise ValueError("boom in user code")
        compute()
    """)
    assert result.status == "error"
    assert result.exit_code == 1
    assert "Traceback" in result.stderr
    assert "ValueError: boom in user code" in result.stderr
    assert 'File "main.py", line 3, in compute' in result.stderr
    assert "bootstrap" not in result.stderr  # sandbox frames are not the reader's concern


def test_what_a_program_prints_names_no_path_of_this_machine(executor):
    """A traceback through site-packages, and a program printing where it runs, read the same on
    every machine: these texts reach the models' prompts, and a prompt naming the host's Python
    prefix made a run recorded on one machine unreplayable on another (CI's clone lives elsewhere)."""
    result = run(executor, """
        import os, sys
        print("cwd", os.getcwd())
        print("numpy at", __import__("numpy").__file__)
        from scipy import no_such_module
    """)
    assert result.status == "error" and "ImportError" in result.stderr
    for host in {sys.prefix, sys.base_prefix, os.path.realpath(sys.prefix), str(result.workdir)}:
        assert host not in result.stdout + result.stderr
    assert "cwd ." in result.stdout
    assert "<python>/lib/python" in result.stdout and "<python>/lib/python" in result.stderr


def test_exit_code_and_args_are_passed_through(executor):
    result = run(executor, "import sys; print(sys.argv[1:]); sys.exit(3)", args=["--n", "5"])
    assert result.status == "error"
    assert result.exit_code == 3
    assert "['--n', '5']" in result.stdout


def test_input_files_are_copied_and_readable(executor, tmp_path):
    source = tmp_path / "train.csv"
    source.write_text("x\n1\n2\n39\n")
    result = run(executor, """
        total = sum(int(v) for v in open("data/train.csv").read().split()[1:])
        print("total", total)
        open("summary.txt", "w").write(str(total))
    """, inputs={"data/train.csv": source})
    assert result.status == "ok", result.stderr
    assert "total 42" in result.stdout
    assert set(result.files) == {"summary.txt"}  # the copied input is not "produced"
    # the copy is gone once the program ends (only its outputs are kept); the original is untouched
    assert not (result.workdir / "data").exists() and source.read_text() == "x\n1\n2\n39\n"


@pytest.mark.parametrize("relpath", ["../evil.txt", "/etc/evil.txt", "data/../../evil.txt",
                                     "", ".trellis_bootstrap.py"])
def test_unsafe_input_paths_are_rejected(executor, tmp_path, relpath):
    source = tmp_path / "data.txt"
    source.write_text("x")
    before = set(executor.root.iterdir())
    with pytest.raises(ValueError):
        executor.run(ExecutionRequest(code="print(1)", input_files={relpath: source}))
    assert set(executor.root.iterdir()) == before  # rejected before any workdir exists


def test_unsafe_entrypoint_is_rejected(executor):
    with pytest.raises(ValueError):
        executor.run(ExecutionRequest(code="print(1)", entrypoint="../main.py"))


def test_keep_false_removes_the_workdir(tmp_path):
    ex = SubprocessExecutor(root=tmp_path / "runs", keep=False)
    result = ex.run(ExecutionRequest(code="open('a.txt', 'w').write('a')"))
    assert result.status == "ok", result.stderr
    assert "a.txt" in result.files
    assert not result.workdir.exists()


def test_scientific_stack_runs_within_2048_mb(executor):
    result = run(executor, """
        import numpy as np, pandas as pd, scipy.stats
        from sklearn.datasets import load_iris
        from sklearn.ensemble import RandomForestClassifier
        from sklearn.linear_model import LogisticRegression
        X, y = load_iris(return_X_y=True)
        model = LogisticRegression(max_iter=500).fit(X, y)
        forest = RandomForestClassifier(n_estimators=10, random_state=0).fit(X, y)
        frame = pd.DataFrame({"y": y, "pred": model.predict(X), "rf": forest.predict(X)})
        frame.to_csv("predictions.csv", index=False)
        print("accuracy", round(float((frame.y == frame.pred).mean()), 2))
        print("p", round(float(scipy.stats.ttest_ind(X[:50, 0], X[50:100, 0]).pvalue), 6))
    """, memory_mb=2048, wall_seconds=60)
    assert result.status == "ok", result.stderr
    assert result.violations == []
    assert "accuracy 0.9" in result.stdout
    assert "serial mode" not in result.stderr  # joblib's semaphore probe stays quiet
    csv = result.workdir / "predictions.csv"
    assert result.files == {"predictions.csv": hashlib.sha256(csv.read_bytes()).hexdigest()}
    assert csv.read_text().splitlines()[0] == "y,pred,rf"


# ------------------------------------------------------------------- limits

@pytest.mark.parametrize("code", ["while True: pass", "import time; time.sleep(100)"])
def test_wall_clock_timeout_returns_promptly(executor, code):
    started = time.monotonic()
    result = run(executor, code, wall_seconds=2)
    elapsed = time.monotonic() - started
    assert result.status == "timeout"
    assert result.exit_code == -9
    assert 1.9 <= result.duration_s < 5
    assert elapsed < 6


def test_cpu_limit_is_a_timeout(executor):
    result = run(executor, "while True: pass", cpu_seconds=1, wall_seconds=20)
    assert result.status == "timeout"
    assert result.duration_s < 10  # the CPU limit, not the wall clock, stopped it


def test_memory_limit(executor):
    result = run(executor, "data = bytearray(4 * 1024 ** 3)\nprint('allocated')",
                 memory_mb=256)
    assert result.status == "memory"
    assert "MemoryError" in result.stderr
    assert "allocated" not in result.stdout


def test_endless_output_is_capped_and_timed_out(tmp_path):
    cap = 64 * 1024
    ex = SubprocessExecutor(root=tmp_path / "runs", output_cap_bytes=cap)
    result = ex.run(ExecutionRequest(
        code="import itertools\nfor i in itertools.count(): print('line', i)",
        limits=ExecutionLimits(wall_seconds=2)))
    assert result.status == "timeout"
    assert 0 < len(result.stdout) <= cap
    # the kill can cut the last line short, hence the max over complete-looking ones
    numbers = [int(n) for n in re.findall(r"^line (\d+)$", result.stdout, re.M)]
    assert max(numbers) > 10_000  # the tail was kept, not the head


@pytest.mark.parametrize("code", ["import os; os.abort()",
                                  "import ctypes; ctypes.string_at(0)"])
def test_fatal_signals_are_killed(executor, code):
    result = run(executor, code)
    assert result.status == "killed"
    assert result.exit_code is not None and result.exit_code < 0


# -------------------------------------------------------------- confinement

def test_writing_outside_the_workdir_is_a_violation(executor, victim, tmp_path):
    new_file = tmp_path / "created-by-sandbox.txt"
    result = run(executor, f"""
        open({str(victim)!r}, "a").write("pwned")
    """)
    assert result.status == "violation"
    assert any(str(victim) in v for v in result.violations)
    assert victim.read_text() == "original\n"

    result = run(executor, f"""
        try:
            open({str(new_file)!r}, "w").write("pwned")
        except PermissionError:
            print("caught it")   # catching the denial does not hide the violation
    """)
    assert result.status == "violation"
    assert result.exit_code == 0
    assert "caught it" in result.stdout
    assert not new_file.exists()


def test_writing_to_the_project_tree_is_denied(executor):
    target = PROJECT_ROOT / "sandbox-escape-marker.txt"
    try:
        result = run(executor, f"open({str(target)!r}, 'w').write('x')")
        assert result.status == "violation"
        assert not target.exists()
    finally:
        target.unlink(missing_ok=True)  # a weakened sandbox must not litter the tree


@pytest.mark.parametrize("code", [
    "import os; os.remove({victim!r})",
    "import os; os.rename({victim!r}, 'stolen.txt')",
    "import shutil; shutil.rmtree({parent!r})",
    "import os; os.link({victim!r}, 'hard'); open('hard', 'w').write('pwned')",
    "import os; os.symlink({victim!r}, 'soft'); open('soft', 'w').write('pwned')",
    "import os; fd = os.open({parent!r}, os.O_RDONLY); "
    "os.open('victim.txt', os.O_WRONLY | os.O_TRUNC, dir_fd=fd)",
])
def test_file_system_escapes_fail(executor, victim, code):
    # a violation where the audit hook sees the path; "error" (no such file) where the
    # private file-system view does not hold the victim at all
    result = run(executor, code.format(victim=str(victim), parent=str(victim.parent)))
    assert result.status in ("violation", "error"), result.stderr
    assert victim.read_text() == "original\n"
    assert "soft" not in result.files and "hard" not in result.files


def test_reading_project_source_is_denied(executor):
    result = run(executor, f"print(open({str(PROJECT_SOURCE)!r}).read())")
    assert result.status in ("violation", "error")  # "error": not even in the program's view
    assert "class ExecutionResult" not in result.stdout


def test_listing_the_project_is_denied(executor):
    result = run(executor, f"import os; print(os.listdir({str(PROJECT_ROOT)!r}))")
    assert result.status in ("violation", "error")
    assert "engine" not in result.stdout


def test_kernel_layer_blocks_ctypes_file_access(executor, victim):
    if landlock_abi() < 1:
        pytest.skip("Landlock not available: only the audit hook confines files here")
    result = run(executor, f"""
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        print("write", libc.open({str(victim).encode()!r}, os.O_WRONLY | os.O_TRUNC))
        print("read", libc.open({str(PROJECT_SOURCE).encode()!r}, os.O_RDONLY))
    """)
    assert "write -1" in result.stdout and "read -1" in result.stdout
    assert victim.read_text() == "original\n"


def test_socket_connection_is_denied(executor):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.5)
    port = server.getsockname()[1]
    try:
        result = run(executor, f"""
            import socket
            sock = socket.socket()
            sock.settimeout(2)
            sock.connect(("127.0.0.1", {port}))
            sock.sendall(b"leak")
        """)
        assert result.status == "violation"
        assert any("socket.connect" in v or "socket.__new__" in v for v in result.violations)
        with pytest.raises(socket.timeout):
            server.accept()  # nothing ever reached the listener
    finally:
        server.close()


def test_udp_datagrams_are_denied(executor):
    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    receiver.bind(("127.0.0.1", 0))
    receiver.settimeout(0.5)
    port = receiver.getsockname()[1]
    try:
        result = run(executor, f"""
            import socket
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"leak", ("127.0.0.1", {port}))
        """)
        assert result.status == "violation"
        assert any("socket.sendto" in v or "socket.__new__" in v for v in result.violations)
        with pytest.raises(socket.timeout):
            receiver.recvfrom(16)
    finally:
        receiver.close()


def test_dns_lookup_is_denied(executor):
    result = run(executor, "import socket; socket.getaddrinfo('example.com', 443)")
    assert result.status == "violation"
    assert any("getaddrinfo" in v for v in result.violations)


@pytest.mark.parametrize("code", [
    "import subprocess; print(subprocess.run(['echo', 'escaped-marker'], capture_output=True))",
    "import os; os.system('echo escaped-marker')",
    "import os; os.execv('/bin/echo', ['echo', 'escaped-marker'])",
    "import os\nif os.fork() == 0: print('escaped-marker')",
    "import multiprocessing as mp\nctx = mp.get_context('spawn')\n"
    "if __name__ == '__main__':\n    p = ctx.Process(target=print, args=('escaped-marker',))\n"
    "    p.start(); p.join()",
])
def test_process_creation_is_denied(executor, code):
    result = run(executor, code)
    assert result.status == "violation", result.stderr
    assert "escaped-marker" not in result.stdout


def test_processes_started_behind_the_hooks_back_die_with_the_program(executor, caplog, tmp_path):
    caplog.set_level(logging.DEBUG, logger="engine.sandbox.subprocess_executor")
    started = time.monotonic()
    result = run(executor, """
        import ctypes, os, time
        libc = ctypes.CDLL(None)
        if libc.fork() == 0:          # raw fork: no audit event
            libc.setsid()             # and out of the process group
            time.sleep(1.5)
            open("orphan.txt", "w").write("still alive")
            os._exit(0)
        print("parent done")
    """)
    assert time.monotonic() - started < 5  # an orphan holding the pipes cannot hang us
    if not layers(caplog).get("pidns"):
        pytest.skip("no PID namespace here: a raw-forked orphan can outlive the run")
    assert result.status == "ok"
    time.sleep(2.5)
    assert not (result.workdir / "orphan.txt").exists()


def test_killing_other_processes_is_denied(executor):
    result = run(executor, f"import os, signal; os.kill({os.getpid()}, signal.SIGTERM)")
    assert result.status == "violation"


def test_environment_is_clean(executor, monkeypatch):
    monkeypatch.setenv("TRELLIS_SECRET_TOKEN", "do-not-leak")
    result = run(executor, """
        import os, sys
        print(sorted(os.environ))
        print("HOME", os.environ["HOME"] == os.getcwd())
        print("flags", sys.flags.isolated, sys.flags.dont_write_bytecode)
    """)
    assert result.status == "ok", result.stderr
    assert "TRELLIS_SECRET_TOKEN" not in result.stdout and "PYTHONPATH" not in result.stdout
    assert "OMP_NUM_THREADS" in result.stdout and "MPLBACKEND" in result.stdout
    assert "HOME True" in result.stdout
    assert "flags 1 1" in result.stdout


def test_privileges_are_dropped_when_running_as_root():
    if os.geteuid() != 0:
        pytest.skip("the engine does not run as root")
    chosen = None
    for python in (sys.executable, "/usr/bin/python3"):
        if not Path(python).exists():
            continue
        ex = SubprocessExecutor(python=python)  # default root: /tmp, reachable by nobody
        if ex.drops_privileges:
            chosen = ex
            break
        shutil.rmtree(ex.root, ignore_errors=True)
    if chosen is None:
        pytest.skip("no interpreter the unprivileged sandbox user can run")
    try:
        result = chosen.run(ExecutionRequest(code="import os; print('uid', os.getuid())"))
        assert result.status == "ok", result.stderr
        assert "uid 0" not in result.stdout
    finally:
        shutil.rmtree(chosen.root, ignore_errors=True)
