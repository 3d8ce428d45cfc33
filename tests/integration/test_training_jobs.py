"""Training jobs in the real sandbox: curves reported as events, checkpoints kept, a person's
pause, and a resume from the last checkpoint after the engine was killed with SIGKILL."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from engine.sandbox import ExecutionLimits, ExecutionRequest
from engine.sandbox.subprocess_executor import SubprocessExecutor
from engine.trace import ListSink, Tracer
from engine.training.jobs import JobFolder, TrainingExecutor, is_training_program, job_key, list_jobs, tracing_to

ROOT = Path(__file__).resolve().parents[2]

# Gradient descent on a line, one epoch per `pause` seconds; a checkpoint after every epoch.
PROGRAM = textwrap.dedent('''
    import json, sys, time
    import numpy as np
    import trellis_train as tt

    EPOCHS, PAUSE = {epochs}, {pause}
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, 200); y = 3.0 * x + 0.5 + rng.normal(0, 0.01, 200)
    w = np.zeros(2); start = 0
    if (path := tt.resume_path()) is not None:
        state = json.load(open(path)); w = np.array(state["w"]); start = state["epoch"] + 1
        print("resumed at", start)
    for epoch in range(start, EPOCHS):
        pred = w[0] * x + w[1]
        grad = np.array([np.mean((pred - y) * x), np.mean(pred - y)])
        w -= 0.5 * grad
        loss = float(np.mean((w[0] * x + w[1] - y) ** 2))
        tt.report(epoch=epoch, epochs=EPOCHS, loss=loss, val=loss * 1.1, lr=0.5, grad_norm=float(np.abs(grad).sum()))
        with tt.saving("checkpoint.json", epoch=epoch) as p:
            json.dump({{"w": w.tolist(), "epoch": epoch}}, open(p, "w"))
        time.sleep(PAUSE)
    print(json.dumps({{"w": w.tolist(), "device": tt.device()}}))
''')


def _program(epochs: int = 6, pause: float = 0.0) -> str:
    return PROGRAM.format(epochs=epochs, pause=pause)


def _request(code: str) -> ExecutionRequest:
    return ExecutionRequest(code=code, limits=ExecutionLimits(wall_seconds=60, cpu_seconds=60))


def _run(tmp_path: Path, code: str, executor: TrainingExecutor | None = None):
    executor = executor or TrainingExecutor(SubprocessExecutor(tmp_path / "sandboxes"), tmp_path / "training",
                                            device="cpu")
    sink = ListSink()
    with tracing_to(Tracer("t", [sink])):
        result = executor.run(_request(code))
    return result, sink.events, executor


def _kinds(events, kind):
    return [e.payload for e in events if e.kind == kind]


def test_training_program_reports_curves_and_keeps_checkpoints(tmp_path):
    result, events, executor = _run(tmp_path, _program(epochs=5))
    assert result.ok, result.stderr
    started, = _kinds(events, "training_started")
    assert started["device"] == "cpu" and started["resumed_from"] is None
    progress = _kinds(events, "training_progress")
    assert [p["epoch"] for p in progress] == [0, 1, 2, 3, 4]
    assert progress[-1]["loss"] < progress[0]["loss"]  # it learned
    assert progress[0]["extra"]["grad_norm"] > 0 and progress[-1]["epochs"] == 5
    checkpoints = _kinds(events, "training_checkpoint")
    assert len(checkpoints) == 5 and checkpoints[-1]["epoch"] == 4
    finished, = _kinds(events, "training_finished")
    assert finished["status"] == "ok" and finished["epochs"] == 5
    state, = list_jobs(tmp_path / "training")
    assert state.status == "ok" and len(state.points) == 5 and state.checkpoint["epoch"] == 4
    kept = JobFolder(tmp_path / "training", state.key).checkpoint_file(state)
    assert json.loads(kept.read_text())["epoch"] == 4
    assert "trellis_train.py" not in result.files and ".trellis_job.json" not in result.files


def test_a_plain_program_is_not_a_job(tmp_path):
    assert not is_training_program("import numpy\nprint(1)")
    assert is_training_program("from trellis_train import report\n")
    assert not is_training_program("def broken(:\n import trellis_train")
    result, events, _ = _run(tmp_path, "print('hello')")
    assert result.ok and not events and not (tmp_path / "training").exists()


def test_a_paused_job_resumes_from_its_last_checkpoint(tmp_path):
    code = _program(epochs=8, pause=0.4)
    executor = TrainingExecutor(SubprocessExecutor(tmp_path / "sandboxes"), tmp_path / "training", device="cpu")
    folder = JobFolder(tmp_path / "training", job_key(_request(code)))

    def pause_after_two_checkpoints():
        deadline = time.time() + 30
        while time.time() < deadline:
            state = folder.load()
            if state.checkpoint and state.checkpoint["epoch"] >= 1:
                folder.send("pause")
                return
            time.sleep(0.1)

    threading.Thread(target=pause_after_two_checkpoints, daemon=True).start()
    first, events, _ = _run(tmp_path, code, executor)
    assert not first.ok
    assert _kinds(events, "training_finished")[0]["status"] == "paused"
    paused_at = folder.load().checkpoint["epoch"]
    assert 1 <= paused_at < 7

    second, events, _ = _run(tmp_path, code, executor)
    assert second.ok, second.stderr
    started, = _kinds(events, "training_started")
    assert started["resumed_epoch"] == paused_at
    epochs = [p["epoch"] for p in _kinds(events, "training_progress")]
    assert epochs[0] == paused_at + 1 and epochs[-1] == 7  # continued, not restarted
    assert f"resumed at {paused_at + 1}" in second.stdout


DRIVER = textwrap.dedent('''
    import sys
    from pathlib import Path
    sys.path.insert(0, {root!r})
    from engine.sandbox import ExecutionLimits, ExecutionRequest
    from engine.sandbox.subprocess_executor import SubprocessExecutor
    from engine.training.jobs import TrainingExecutor
    tmp = Path({tmp!r})
    code = Path(tmp / "program.py").read_text()
    TrainingExecutor(SubprocessExecutor(tmp / "sandboxes"), tmp / "training", device="cpu").run(
        ExecutionRequest(code=code, limits=ExecutionLimits(wall_seconds=60, cpu_seconds=60)))
''')


@pytest.mark.slow
def test_a_job_killed_with_sigkill_resumes_from_its_last_checkpoint(tmp_path):
    """The engine process running the job dies (kill -9): the next run of the same program is
    handed the last checkpoint it kept, and goes on from there."""
    code = _program(epochs=10, pause=0.3)
    (tmp_path / "program.py").write_text(code)
    driver = subprocess.Popen([sys.executable, "-c", DRIVER.format(root=str(ROOT), tmp=str(tmp_path))],
                              start_new_session=True)
    folder = JobFolder(tmp_path / "training", job_key(_request(code)))
    deadline = time.time() + 60
    while time.time() < deadline and not ((s := folder.load()).checkpoint and s.checkpoint["epoch"] >= 2):
        time.sleep(0.1)
    os.killpg(driver.pid, signal.SIGKILL)  # the engine and the program with it
    driver.wait(10)
    killed_at = folder.load().checkpoint["epoch"]
    assert folder.load().status == "running"  # nobody lived to say otherwise

    result, events, _ = _run(tmp_path, code)
    assert result.ok, result.stderr
    assert _kinds(events, "training_started")[0]["resumed_epoch"] == killed_at
    assert _kinds(events, "training_progress")[0]["epoch"] == killed_at + 1


HOSTILE = textwrap.dedent('''
    import os
    import trellis_train as tt
    os.makedirs("training/checkpoints", exist_ok=True)
    os.symlink("/etc/passwd", "training/metrics.jsonl")        # the engine must not read it
    os.symlink("/etc/shadow", "training/checkpoints/evil.pt")
    print("done")
''')


def test_a_program_cannot_point_the_job_at_files_outside(tmp_path):
    result, events, executor = _run(tmp_path, HOSTILE)
    assert result.ok
    assert not _kinds(events, "training_progress") and not _kinds(events, "training_checkpoint")
    state, = list_jobs(tmp_path / "training")
    assert state.checkpoint is None and state.points == []


def test_garbage_reports_are_skipped_not_fatal(tmp_path):
    code = textwrap.dedent('''
        import os, trellis_train as tt
        os.makedirs("training", exist_ok=True)
        with open("training/metrics.jsonl", "a") as fh:
            fh.write("not json\\n" + "[1, 2]\\n" + '{"epoch": "x", "loss": "NaN"}\\n' + "x" * 10000 + "\\n")
        tt.report(epoch=0, loss=float("nan"), val=0.5)
        tt.report(epoch=1, loss=1.0, val=float("inf"), lr=None)
    ''')
    result, events, _ = _run(tmp_path, code)
    assert result.ok, result.stderr
    progress = _kinds(events, "training_progress")
    assert [p.get("epoch") for p in progress] == [0, 1]  # the lines with nothing usable are not points
    assert progress[0].get("loss") is None and progress[0]["val"] == 0.5
    assert progress[1]["loss"] == 1.0 and progress[1].get("val") is None
