"""Issue 37, item 3: sandbox limits came from whoever uploaded the task. Data_config.json could ask
for 64 GB of memory, a 1 TB working folder or a day of wall clock; a cap above the free space was
no cap (a program allowed 1000 MB filled a 300 MB file system, and the executor then crashed on
"no space left" copying its outputs); and a Docker daemon that went away failed every later
program with a traceback each. Now: operator ceilings refuse such a task by name; a cap above the
free space is refused; running out of space is a failed program; a lost daemon pauses the run."""
from __future__ import annotations

import json
import shutil
import subprocess
import textwrap

import pytest

from engine.errors import ExecutorLost, TaskSpecError
from engine.sandbox import ExecutionLimits, ExecutionRequest
from engine.sandbox.subprocess_executor import SubprocessExecutor
from engine.task import load_task
from tests.conftest import EXAMPLES


def _task_with_limits(tmp_path, limits: dict):
    folder = tmp_path / "greedy"
    shutil.copytree(EXAMPLES / "discontinuous-1d", folder)
    config = json.loads((folder / "Data_config.json").read_text())
    config["limits"] = {**config.get("limits", {}), **limits}
    (folder / "Data_config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize("limits, says", [
    ({"memory_mb": 65_536}, "TRELLIS_SANDBOX_MAX_MEMORY_MB"),
    ({"max_disk_mb": 1_048_576}, "TRELLIS_SANDBOX_MAX_MAX_DISK_MB"),
    ({"wall_seconds": 86_400, "cpu_seconds": 86_400}, "TRELLIS_SANDBOX_MAX_WALL_SECONDS"),
])
def test_a_task_asking_more_than_the_operator_allows_is_refused_by_name(tmp_path, limits, says):
    with pytest.raises(TaskSpecError) as refused:
        load_task(_task_with_limits(tmp_path, limits))
    assert says in str(refused.value) and "Data_config.json" in str(refused.value)


def test_the_operator_sets_the_ceiling(tmp_path, monkeypatch):
    folder = _task_with_limits(tmp_path, {"memory_mb": 3000})
    assert load_task(folder).resources.limits.memory_mb == 3000
    monkeypatch.setenv("TRELLIS_SANDBOX_MAX_MEMORY_MB", "2048")
    with pytest.raises(TaskSpecError, match="memory_mb 3000 is above this studio's ceiling of 2048"):
        load_task(folder)


@pytest.fixture
def small_disk(tmp_path):
    """A real 48 MB file system (tmpfs) for the sandbox's root."""
    where = tmp_path / "small"
    where.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(where)], capture_output=True)
    if done.returncode:
        pytest.skip(f"cannot mount a small file system here: {done.stderr.decode()[:200]}")
    yield where
    subprocess.run(["umount", "-l", str(where)], capture_output=True)


def test_a_cap_above_the_free_space_is_refused(small_disk):
    executor = SubprocessExecutor(small_disk / "sandboxes")
    result = executor.run(ExecutionRequest(code="open('out.bin', 'wb').write(b'x' * 100_000_000)",
                                           limits=ExecutionLimits(max_disk_mb=1000)))
    assert result.status == "error"
    assert "is above the" in result.stderr and "MB free where programs run" in result.stderr


def test_running_out_of_space_is_a_failed_program_not_a_crash(small_disk):
    executor = SubprocessExecutor(small_disk / "sandboxes")
    filled = []

    def fill(_workdir) -> bool:  # the disk fills from outside while the program runs
        if not filled:
            with open(small_disk / "filler", "wb") as fh:
                try:
                    while True:
                        fh.write(b"\0" * (1 << 20))
                        fh.flush()
                except OSError:
                    pass
            filled.append(True)
        return False

    code = textwrap.dedent("""
        import time
        time.sleep(1.5)
        with open('out.bin', 'wb') as fh:
            fh.write(b'y' * 8_000_000)
    """)
    result = executor.run(ExecutionRequest(code=code, limits=ExecutionLimits(max_disk_mb=40, wall_seconds=30),
                                           watch=fill))
    assert filled and result.status == "error"
    assert "No space left" in result.stderr or "no space left" in result.stderr


def test_a_daemon_that_went_away_pauses_the_run_instead_of_failing_every_program(docker_image, tmp_path):
    import docker

    from engine.sandbox.docker_executor import DockerExecutor

    executor = DockerExecutor(tmp_path / "sandboxes", warm=0)
    try:
        executor.client = docker.DockerClient(base_url=f"unix://{tmp_path}/no-daemon.sock", version="1.43")  # the daemon is gone
        with pytest.raises(ExecutorLost) as lost:
            executor.run(ExecutionRequest(code="print('hello')"))
        assert lost.value.reason.startswith("paused: the Docker daemon stopped answering")
    finally:
        executor.client = docker.from_env()
        executor.close()
