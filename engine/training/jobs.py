"""Training jobs: a program that imports ``trellis_train`` runs as a job.

The job is the program and its inputs (its key hashes both), so running the same program again,
in a resumed search or in the hindsight, is the same job: it is handed its last checkpoint and
continues from there instead of training from scratch. While it runs, what it reports becomes
``training_progress`` events (live curves), what it saves is kept in the run's artifact store
(``training_checkpoint``), and a person's pause or cancel (a command in the job's folder) stops it.

Each job has a folder under ``<run>/training/<key>/``: ``state.json`` (status, device, epochs,
last checkpoint, the curve's points), ``control`` (a command: pause, cancel) and
``checkpoints/`` (the artifact store). Both the process that runs the program and the one that
waits for it read and write only there, so a job can run in a Celery worker of its own
(``remote.py``: the run's process hands the job to a ``JobHost`` and forwards its events).

A paused job is waited on, not given up: the run that needs it stays with it until a person
resumes it (the command is cleared and the job goes on from its last checkpoint) or cancels it
(the run is handed the cancelled execution and goes on without it). When the run itself stops
(paused, cancelled, its lease lost), its job is stopped too and continues, from its last
checkpoint, when the run runs the program again.
"""
from __future__ import annotations

import ast
import contextlib
import functools
import json
import math
import os
import tempfile
import threading
import time
from contextvars import ContextVar
from dataclasses import replace
from pathlib import Path
from typing import Callable, Iterator

from .. import python_ast
from ..protocol.events import Payload, TrainingCheckpoint, TrainingFinished, TrainingProgress, TrainingStarted
from ..sandbox import ExecutionRequest, ExecutionResult, Executor, UnsafeOutput, open_output
from . import trellis_train as helper
from .folder import Command, JobFolder, JobHost, JobState, cancelled_while_paused, job_key, not_run
from .remote import wait_for_job, waiting_here

HELPER_SOURCE = Path(helper.__file__)
HELPER_NAME = "trellis_train.py"
MAX_LINE_BYTES = 4096          # a longer metrics line is not a report, it is noise
MAX_READ_PER_POLL = 1 << 20    # bytes of the metrics file read per poll
MAX_POINTS = 5000              # points of a curve kept in state.json (the trace keeps them all)
WATCH_SECONDS = 0.5
PAUSED_POLL_S = 0.5            # how often a run waiting on a paused job looks at its command

_tracer: ContextVar[object | None] = ContextVar("trellis_training_tracer", default=None)
_host: ContextVar["JobHost | None"] = ContextVar("trellis_training_host", default=None)
_label: ContextVar[tuple[str, str | None]] = ContextVar("trellis_training_label", default=("", None))


@contextlib.contextmanager
def hosting_jobs(host: JobHost | None) -> Iterator[None]:
    """Training programs run inside this block go to ``host`` (when it has slots) and are
    waited on with its ``waiting`` hook, which is also called while a job run here is paused."""
    token = _host.set(host)
    try:
        yield
    finally:
        _host.reset(token)


def set_job_host(host: JobHost | None) -> None:
    """``hosting_jobs`` for the rest of this thread's context, for a framework's task hooks that
    cannot wrap the task in a block (webapp/runs/training.py: Celery's task_prerun/postrun)."""
    _host.set(host)


@contextlib.contextmanager
def labelled(purpose: str, node: str | None = None) -> Iterator[None]:
    """What the training jobs started inside this block are for (a tree node's validation),
    shown beside their curves."""
    token = _label.set((purpose, node))
    try:
        yield
    finally:
        _label.reset(token)


@contextlib.contextmanager
def tracing_to(tracer: object) -> Iterator[None]:
    """Training events of the programs run inside this block go to ``tracer`` (each probe of a
    search has its own trace, while the executor is shared by all of them)."""
    token = _tracer.set(tracer)
    try:
        yield
    finally:
        _tracer.reset(token)


def is_training_program(code: str) -> bool:
    """Whether a program declares itself a training job: it imports ``trellis_train``."""
    try:
        tree = python_ast.parse(code)
    except (SyntaxError, ValueError):
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "trellis_train" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "trellis_train":
            return True
    return False


def detect_device() -> str:
    """CUDA when this machine has a GPU torch can use, else CPU (the same program runs on both).
    TRELLIS_TRAINING_DEVICE=cpu|cuda overrides. Asked once per process (torch takes seconds to
    import), and only when a training job starts."""
    wanted = os.environ.get("TRELLIS_TRAINING_DEVICE", "").strip().lower()
    if wanted in {"cpu", "cuda"}:
        return wanted
    return _torch_device()


@functools.cache
def _torch_device() -> str:
    try:
        import torch
    except ImportError:
        return "cpu"
    try:
        return "cuda" if torch.cuda.is_available() else "cpu"
    except Exception:  # noqa: BLE001 - a broken driver is a machine without a GPU
        return "cpu"


def visible_gpus() -> list[str]:
    """The GPUs training workers may use, one worker process each: CUDA_VISIBLE_DEVICES where
    set, else the NVIDIA driver's list (no torch import, no subprocess); none on a CPU machine."""
    pinned = os.environ.get("CUDA_VISIBLE_DEVICES")
    if pinned is not None:
        return [g.strip() for g in pinned.split(",") if g.strip() and g.strip() != "-1"]
    try:
        return [str(i) for i in range(len(os.listdir("/proc/driver/nvidia/gpus")))]
    except OSError:
        return []


class _Watcher:
    """Called by the executor every ~0.5 s with the program's working folder: turns the new lines
    of its metrics file into events and keeps its checkpoints; says stop when a person asked, or
    when the run waiting on the job stopped (its ``waiting`` hook raised: kept in ``interrupted``)."""

    def __init__(self, folder: JobFolder, state: JobState, emit: Callable[[Payload], None],
                 max_checkpoint_bytes: int, waiting: Callable[[], None] | None = None) -> None:
        self.folder, self.state, self.emit = folder, state, emit
        self.max_checkpoint_bytes = max_checkpoint_bytes
        self.waiting = waiting
        self.offset = 0
        self.pending = b""
        self.stopped_by: Command | None = None
        self.interrupted: BaseException | None = None
        self.device_said: str | None = None
        self.next_poll = 0.0
        self.lock = threading.Lock()

    def __call__(self, workdir: Path) -> bool:
        now = time.monotonic()
        if now < self.next_poll:
            return self.stopped_by is not None
        self.next_poll = now + WATCH_SECONDS
        self.drain(workdir)
        if self.stopped_by is None and self.waiting is not None:
            try:
                self.waiting()
            except BaseException as exc:  # noqa: BLE001 - RunInterrupted: the run stops, so does its job
                self.interrupted, self.stopped_by = exc, "stop"
        if self.stopped_by is None:
            self.stopped_by = self.folder.command()
        return self.stopped_by is not None

    def drain(self, workdir: Path) -> None:
        with self.lock:
            changed = False
            for line in self._new_lines(workdir):
                changed |= self._take(workdir, line)
            if changed:
                self.state.updated = time.time()
                self.folder.save(self.state)

    def _new_lines(self, workdir: Path) -> list[bytes]:
        try:
            # never through a link: the program owns its folder and may point it anywhere
            with open_output(workdir, helper.METRICS_FILE, max_bytes=1 << 40) as fh:
                fh.seek(self.offset)
                data = fh.read(MAX_READ_PER_POLL)
        except (OSError, UnsafeOutput):
            return []
        self.offset += len(data)
        data = self.pending + data
        lines = data.split(b"\n")
        self.pending = lines.pop()[-MAX_LINE_BYTES:]
        return [line for line in lines if 0 < len(line) <= MAX_LINE_BYTES]

    def _take(self, workdir: Path, line: bytes) -> bool:
        try:
            entry = json.loads(line)
        except ValueError:
            return False
        if not isinstance(entry, dict):
            return False
        epoch = _int(entry.get("epoch"))
        if "checkpoint" in entry:
            return self._keep_checkpoint(workdir, str(entry["checkpoint"]), epoch)
        if "device" in entry and len(entry) <= 2:  # the helper's word on the device it actually got
            said = entry.get("device")
            if isinstance(said, str) and (said == "cpu" or said.startswith("cuda")) and len(said) <= 12:
                self.state.device = said
                return True
            return False
        values = {k: _float(entry.get(k)) for k in ("loss", "val", "lr")}
        extra = entry.get("extra") if isinstance(entry.get("extra"), dict) else {}
        extra = {str(k)[:40]: f for k, v in list(extra.items())[:20] if (f := _float(v)) is not None}
        epochs = _int(entry.get("epochs"))
        if epoch is None and _int(entry.get("step")) is None and not extra and all(v is None for v in values.values()):
            return False  # nothing a curve could show
        s = self.state
        s.epochs = epochs or s.epochs
        s.epoch = epoch if epoch is not None else s.epoch
        if values["val"] is not None:
            s.best_val = values["val"] if s.best_val is None else min(s.best_val, values["val"])
        s.eta_s = self._eta()
        point = {"t": round(time.time() - s.started, 3), "epoch": epoch, **{k: v for k, v in values.items()
                                                                              if v is not None}}
        s.points.append(point)
        del s.points[:-MAX_POINTS]
        device = None
        if s.device != self.device_said:  # said once, with the first point after it changed
            device = self.device_said = s.device
        self.emit(TrainingProgress(job=s.key, epoch=epoch, step=_int(entry.get("step")), epochs=s.epochs,
                                   eta_s=s.eta_s, extra=extra, device=device, **values))
        return True

    def _eta(self) -> float | None:
        s = self.state
        if s.epoch is None or not s.epochs or s.epoch < 0:
            return None
        done = s.epoch + 1 - s.first_epoch
        if done <= 0:
            return None
        elapsed = time.time() - s.started
        return round(max(s.epochs - s.epoch - 1, 0) * elapsed / done, 1)

    def _keep_checkpoint(self, workdir: Path, name: str, epoch: int | None) -> bool:
        rel = f"{helper.CHECKPOINT_DIR}/{os.path.basename(name)}"
        try:
            with open_output(workdir, rel, self.max_checkpoint_bytes) as fh:
                sha = self.folder.store.put_stream(fh)
        except (OSError, UnsafeOutput):
            return False  # replaced again already, or made into a link: the next one counts
        size = self.folder.store.path_for(sha).stat().st_size
        self.state.checkpoint = {"name": os.path.basename(name), "sha256": sha, "bytes": size, "epoch": epoch}
        self.emit(TrainingCheckpoint(job=self.state.key, path=rel, sha256=sha, bytes=size, epoch=epoch))
        return True


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _float(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def tracer_emit(agent: str = "trainer") -> Callable[[Payload], None]:
    """An emit into the trace of the block this is called in (``tracing_to``), or nowhere."""
    tracer = _tracer.get()

    def emit(payload: Payload) -> None:
        if tracer is not None:
            tracer.emit(payload, agent)
    return emit


def wait_while_paused(folder: JobFolder, waiting: Callable[[], None] | None) -> Command | None:
    """Until a person resumes the paused job (its command cleared: None) or cancels it
    ("cancel"); ``waiting`` may stop the wait (the run was paused or cancelled)."""
    while True:
        command = folder.command()
        if command != "pause":
            return "cancel" if command == "cancel" else None
        if waiting is not None:
            waiting()
        time.sleep(PAUSED_POLL_S)


class TrainingExecutor:
    """Runs training programs as jobs, and everything else as ``inner`` would.

    ``root``: where the jobs' folders are (``<run>/training``). ``device``: "auto" (CUDA when
    present, else CPU, decided when the first job starts), "cpu" or "cuda". Where a job runs is
    the ``JobHost`` of the block it is run in (``hosting_jobs``): a training worker when the host
    has slots, else here, in this process."""

    def __init__(self, inner: Executor, root: Path, *, device: str = "auto") -> None:
        self.inner = inner
        self.root = Path(root)
        self._device = device

    @property
    def device(self) -> str:
        if self._device == "auto":
            self._device = detect_device()
        return self._device

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def capacity(self) -> int:
        """Training jobs that can run at once: the job host's slots (training workers' processes,
        one per device) in the block this is asked in; 1 when jobs run here."""
        host = _host.get()
        return max(1, host.slots()) if host is not None else 1

    def __getattr__(self, attr: str):  # the inner executor's other attributes (root, python, ...)
        if attr in ("inner", "_device"):  # not set yet (unpickling): never recurse
            raise AttributeError(attr)
        return getattr(self.inner, attr)

    def run(self, request: ExecutionRequest) -> ExecutionResult:
        if not is_training_program(request.code):
            return self.inner.run(request)
        host = _host.get()
        purpose, node = _label.get()
        emit = tracer_emit()
        if host is not None and host.slots() > 0 and getattr(self.inner, "root", None) is not None:
            return wait_for_job(self, request, host, emit, purpose=purpose, node=node)
        return self.run_here(request, emit, purpose=purpose, node=node,
                             waiting=host.waiting if host is not None else None)

    def run_here(self, request: ExecutionRequest, emit: Callable[[Payload], None], *, purpose: str = "",
                 node: str | None = None, waiting: Callable[[], None] | None = None) -> ExecutionResult:
        """The job in this process; while a person has it paused, wait for their resume or cancel."""
        folder = JobFolder(self.root, job_key(request))
        with waiting_here(folder):
            while True:
                result = self.run_job(request, emit=emit, purpose=purpose, node=node, waiting=waiting)
                if folder.load().status != "paused":
                    return result
                if wait_while_paused(folder, waiting) == "cancel":
                    return cancelled_while_paused(folder, emit)

    def run_job(self, request: ExecutionRequest, purpose: str = "", *, emit: Callable[[Payload], None] | None = None,
                node: str | None = None, waiting: Callable[[], None] | None = None) -> ExecutionResult:
        """Run the program once, from the job's last checkpoint if it has one. A person's pause or
        cancel stops it (status paused / cancelled, the result not ok); so does ``waiting``
        raising, which is raised again here once the job is saved as paused."""
        folder = JobFolder(self.root, job_key(request))
        state = folder.load()
        emit = emit or tracer_emit()
        command = folder.command()
        if command == "stop":  # the engine stopped the last start: this one goes on
            folder.send(None)
        elif command in ("pause", "cancel"):  # a person's, from before this start: it stands
            state.status = "paused" if command == "pause" else "cancelled"
            state.purpose, state.node = purpose or state.purpose, node or state.node
            state.updated = time.time()
            folder.save(state)
            return not_run(folder, f"the training job was {state.status} by a person before it started again")

        folder.keep_request(request, self.inner)  # for a person's resume when no run waits on the job
        resume = folder.checkpoint_file(state)
        state.status, state.device, state.purpose = "running", self.device, purpose or state.purpose
        state.node = node or state.node
        state.started, state.runs = time.time(), state.runs + 1
        state.first_epoch = (state.checkpoint.get("epoch") or -1) + 1 if resume and state.checkpoint else 0
        folder.save(state)
        emit(TrainingStarted(job=state.key, purpose=state.purpose, device=state.device, node=state.node,
                             resumed_from=state.checkpoint["sha256"] if resume else None,
                             resumed_epoch=state.checkpoint.get("epoch") if resume else None))
        watcher = _Watcher(folder, state, emit, request.limits.max_file_mb * 1024 * 1024, waiting)
        with tempfile.TemporaryDirectory(prefix="trellis-job-") as tmp:
            job_file = Path(tmp) / helper.JOB_FILE
            job_file.write_text(json.dumps({
                "device": state.device, "job": state.key,
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
                "resume": state.checkpoint["name"] if resume and state.checkpoint else None,
                "resumed_epoch": state.checkpoint.get("epoch") if resume and state.checkpoint else None}))
            inputs = {**request.input_files, HELPER_NAME: HELPER_SOURCE, helper.JOB_FILE: job_file}
            if resume is not None:
                inputs[f"{helper.RESUME_DIR}/{state.checkpoint['name']}"] = resume
            job_request = replace(request, input_files=inputs, watch=watcher)
            started = time.monotonic()
            result = self.inner.run(job_request)
        watcher.drain(result.workdir)  # what it wrote after the last poll
        stopped = watcher.stopped_by or folder.command()
        if stopped and not result.ok:
            state.status = "cancelled" if stopped == "cancel" else "paused"
            who = "the run waiting on it stopped" if stopped == "stop" else "a person"
            result.stderr += f"\ntrellis: the training job was {state.status}: {who}\n"
        else:
            state.status = result.status
        state.updated, state.eta_s = time.time(), None
        folder.save(state)
        emit(TrainingFinished(job=state.key, status=state.status, epochs=state.epoch if state.epoch is None
                              else state.epoch + 1, best_val=state.best_val,
                              last_checkpoint=(state.checkpoint or {}).get("sha256"),
                              duration_s=round(time.monotonic() - started, 3)))
        # the engine's own files are not the program's outputs
        for name in (HELPER_NAME, helper.JOB_FILE):
            result.files.pop(name, None)
        if resume is not None:
            result.files.pop(f"{helper.RESUME_DIR}/{state.checkpoint['name']}", None)
        if watcher.interrupted is not None:
            if folder.command() is None:
                folder.send("stop")  # said as a remote job's is: the engine stopped it, nobody paused it
            raise watcher.interrupted
        return result


def training_executor(inner: Executor, run_dir: Path, device: str = "auto") -> Executor:
    """``inner`` able to run training jobs, their folders under ``<run_dir>/training`` (an executor
    that already is one is returned as it is)."""
    if isinstance(inner, TrainingExecutor):
        return inner
    return TrainingExecutor(inner, Path(run_dir) / "training", device=device)
