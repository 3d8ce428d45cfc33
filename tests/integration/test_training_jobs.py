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
from engine.training.folder import JobFolder, job_key, list_jobs
from engine.training.jobs import TrainingExecutor, is_training_program, tracing_to

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


def _when(predicate, timeout: float = 30) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("timed out")


def _in_thread(fn, *args):
    """Run ``fn`` in a thread with this context (the tracer), returning a box with its outcome."""
    import contextvars

    box: dict = {}
    ctx = contextvars.copy_context()

    def target():
        try:
            box["result"] = ctx.run(fn, *args)
        except BaseException as exc:  # noqa: BLE001
            box["error"] = exc
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    box["thread"] = thread
    return box


@pytest.mark.parametrize("where", ["here", "worker"])
def test_a_paused_job_waits_for_its_resume_and_continues_from_its_checkpoint(tmp_path, where):
    """A person's pause stops the program, keeps its checkpoint, and the run waits; the studio's
    Resume (the command cleared; a training worker's ticket sent again) starts it again from
    there: the epochs continue, not restart."""
    from engine.training import remote
    from engine.training.jobs import hosting_jobs

    code = _program(epochs=8, pause=0.25)
    executor = TrainingExecutor(SubprocessExecutor(tmp_path / "sandboxes"), tmp_path / "training", device="cpu")
    folder = JobFolder(tmp_path / "training", job_key(_request(code)))
    sink = ListSink()
    host = _ThreadHost()
    if where == "here":
        host.slots = lambda: 0
    with tracing_to(Tracer("t", [sink])), hosting_jobs(host):
        box = _in_thread(executor.run, _request(code))
        _when(lambda: (s := folder.load()).checkpoint and s.checkpoint["epoch"] >= 1)
        folder.send("pause")
        _when(lambda: folder.load().status == "paused")
        paused_at = folder.load().checkpoint["epoch"]
        time.sleep(1.0)
        assert box["thread"].is_alive()  # the run waits on its paused job
        assert host.results == ([] if where == "here" else ["paused"])  # the worker is free meanwhile
        assert remote.resend(folder, host.send)  # resume
        box["thread"].join(60)
    assert len(host.sent) == (0 if where == "here" else 2)
    result = box["result"]
    assert result.ok, result.stderr
    events = sink.events
    assert [f["status"] for f in _kinds(events, "training_finished")] == ["paused", "ok"]
    assert [s["resumed_epoch"] for s in _kinds(events, "training_started")] == [None, paused_at]
    epochs = [p["epoch"] for p in _kinds(events, "training_progress")]
    assert epochs[-1] == 7 and epochs[epochs.index(paused_at) + 1] == paused_at + 1  # continued, not restarted
    assert epochs.count(0) == 1
    assert f"resumed at {paused_at + 1}" in result.stdout


def test_a_job_cancelled_while_paused_hands_the_run_a_failed_execution(tmp_path):
    code = _program(epochs=30, pause=0.3)
    executor = TrainingExecutor(SubprocessExecutor(tmp_path / "sandboxes"), tmp_path / "training", device="cpu")
    folder = JobFolder(tmp_path / "training", job_key(_request(code)))
    sink = ListSink()
    with tracing_to(Tracer("t", [sink])):
        box = _in_thread(executor.run, _request(code))
        _when(lambda: folder.load().checkpoint is not None)
        folder.send("pause")
        _when(lambda: folder.load().status == "paused")
        folder.send("cancel")
        box["thread"].join(30)
    result = box["result"]
    assert not result.ok and "cancelled" in result.stderr
    assert [f["status"] for f in _kinds(sink.events, "training_finished")] == ["paused", "cancelled"]
    assert folder.load().status == "cancelled"
    # a cancel stands: the same program run again is not trained behind the person's back
    again, events, _ = _run(tmp_path, code, executor)
    assert not again.ok and not _kinds(events, "training_started")


class _ThreadHost:
    """A JobHost whose training worker is a thread of this process calling worker.work."""

    def __init__(self, stop_when=None):
        from engine.training import worker

        self.worker, self.sent, self.results = worker, [], []
        self.stop_when = stop_when  # the run is paused once this says so

    def slots(self) -> int:
        return 1

    def send(self, spec: dict) -> None:
        self.sent.append(spec)
        worker = threading.Thread(target=lambda: self.results.append(self.worker.work(spec, device="cpu")),
                                  daemon=True)
        worker.start()

    def waiting(self) -> None:
        from engine.errors import RunInterrupted

        if self.stop_when is not None and self.stop_when():
            raise RunInterrupted("paused")


def test_a_job_sent_to_a_training_worker_reports_into_the_waiting_runs_trace(tmp_path):
    from engine.training.jobs import hosting_jobs, labelled

    code = _program(epochs=4)
    host = _ThreadHost()
    sink = ListSink()
    executor = TrainingExecutor(SubprocessExecutor(tmp_path / "sandboxes"), tmp_path / "training", device="cpu")
    with tracing_to(Tracer("t", [sink])), hosting_jobs(host), labelled("n3 validation", "n3"):
        result = executor.run(_request(code))
    assert result.ok, result.stderr
    assert len(host.sent) == 1 and host.results == ["ok"]
    assert json.loads(result.read_file("training/checkpoints/checkpoint.json"))["epoch"] == 3  # its workdir, readable
    started, = _kinds(sink.events, "training_started")
    assert (started["purpose"], started["node"]) == ("n3 validation", "n3")
    assert [p["epoch"] for p in _kinds(sink.events, "training_progress")] == [0, 1, 2, 3]
    assert all(e.agent == "trainer" for e in sink.events)
    assert len(_kinds(sink.events, "training_checkpoint")) == 4
    assert _kinds(sink.events, "training_finished")[0]["status"] == "ok"


@pytest.mark.parametrize("where", ["here", "worker"])
def test_a_run_that_stops_waiting_stops_its_job_and_its_next_start_resumes(tmp_path, where):
    """The run is paused while its job trains: the job stops, keeps its checkpoint, and the same
    program run again (the run resumed) continues from there."""
    from engine.errors import RunInterrupted
    from engine.training.jobs import hosting_jobs

    code = _program(epochs=12, pause=0.25)
    executor = TrainingExecutor(SubprocessExecutor(tmp_path / "sandboxes"), tmp_path / "training", device="cpu")
    folder = JobFolder(tmp_path / "training", job_key(_request(code)))
    host = _ThreadHost(stop_when=lambda: (s := folder.load().checkpoint) is not None and s["epoch"] >= 1)
    if where == "here":
        host.slots = lambda: 0
    with tracing_to(Tracer("t", [ListSink()])), hosting_jobs(host), pytest.raises(RunInterrupted):
        executor.run(_request(code))
    _when(lambda: folder.load().status == "paused", 15)
    stopped_at = folder.load().checkpoint["epoch"]
    assert folder.command() == "stop"

    result, events, _ = _run(tmp_path, code, executor)
    assert result.ok, result.stderr
    assert _kinds(events, "training_started")[0]["resumed_epoch"] == stopped_at
    assert folder.command() is None


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
    os.killpg(driver.pid, signal.SIGKILL)  # the engine; its program is in a session of its own
    driver.wait(10)
    # ... and dies with it (PDEATHSIG): no orphan goes on training with nobody watching
    _when(lambda: not _processes_under(tmp_path / "sandboxes"), 1.0)
    killed_at = folder.load().checkpoint["epoch"]
    assert folder.load().status == "running"  # nobody lived to say otherwise

    result, events, _ = _run(tmp_path, code)
    assert result.ok, result.stderr
    assert _kinds(events, "training_started")[0]["resumed_epoch"] == killed_at
    assert _kinds(events, "training_progress")[0]["epoch"] == killed_at + 1


def _processes_under(folder: Path) -> list[int]:
    """Processes whose command line names ``folder`` (the sandbox's bootstrap names its workdir)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and str(folder).encode() in (proc / "cmdline").read_bytes():
                found.append(int(proc.name))
        except OSError:
            continue
    return found


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


@pytest.mark.slow
def test_the_offline_scientists_neural_program_trains_as_a_job(tmp_path):
    """The mixture of experts the offline scientist writes (engine/offline/neural.py) imports
    trellis_train: run by Trellis it is a job whose epochs are live curve points and whose
    checkpoints the job keeps; run again, it is handed its last one instead of training anew."""
    pytest.importorskip("torch")
    from tests.integration.test_neural_strategy import EPOCHS, LIMITS, SPEC
    from engine.offline import scientist
    from engine.offline.strategies import get_strategy
    from tests.unit.test_neural_strategy import JUMPS, signal
    from tests.unit.test_offline_scientist import make_task

    task = make_task(tmp_path / "task", context=JUMPS, train=signal()[0], test=signal()[1],
                     requirements=("CPU only.", "A neural network (PyTorch) may be used."))
    code = get_strategy("mixture_of_experts").render({"epochs": EPOCHS}, SPEC, scientist.program_seed(0))
    assert is_training_program(code)
    request = ExecutionRequest(code=code, limits=LIMITS,
                               input_files={rel: task / rel for rel in ("data/train.csv", "data/test_features.csv")})
    executor = TrainingExecutor(SubprocessExecutor(tmp_path / "sandboxes"), tmp_path / "training", device="cpu")
    sink = ListSink()
    with tracing_to(Tracer("t", [sink])):
        first = executor.run(request)
    assert first.ok, first.stderr[-2000:]
    assert [p["epoch"] for p in _kinds(sink.events, "training_progress")] == list(range(EPOCHS))
    assert all(p["epochs"] == EPOCHS and p["val"] > 0 for p in _kinds(sink.events, "training_progress"))
    assert [c["epoch"] for c in _kinds(sink.events, "training_checkpoint")] == [4, EPOCHS - 1]  # every 5, and the last
    assert _kinds(sink.events, "training_progress")[0]["device"] == "cpu"  # what the program said it got

    sink = ListSink()
    with tracing_to(Tracer("t", [sink])):
        again = executor.run(request)
    assert again.ok, again.stderr[-2000:]
    assert _kinds(sink.events, "training_started")[0]["resumed_epoch"] == EPOCHS - 1
    assert f"checkpoint: resumed after epoch {EPOCHS} of {EPOCHS}" in again.stdout
    assert not _kinds(sink.events, "training_progress")  # nothing left to train
    assert again.files["predictions.csv"] == first.files["predictions.csv"]
