"""Training jobs: a program that imports ``trellis_train`` runs as a job.

The job is the program and its inputs (its key hashes both), so running the same program again,
in a resumed search or in the hindsight, is the same job: it is handed its last checkpoint and
continues from there instead of training from scratch. While it runs, what it reports becomes
``training_progress`` events (live curves), what it saves is kept in the run's artifact store
(``training_checkpoint``), and a person's pause or cancel (a command in the job's folder) stops it.

Each job has a folder under ``<run>/training/<key>/``: ``state.json`` (status, device, epochs,
last checkpoint, the curve's points), ``control`` (a command: pause, cancel) and
``checkpoints/`` (the artifact store). Both the process that runs the program and the one that
waits for it read and write only there, so a job can run in a Celery worker of its own.
"""
from __future__ import annotations

import ast
import contextlib
import hashlib
import json
import math
import os
import tempfile
import threading
import time
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterator, Literal

from ..artifacts import ArtifactStore, sha256_file
from ..protocol.events import (Payload, TrainingCheckpoint, TrainingFinished, TrainingProgress,
                               TrainingStarted)
from ..sandbox import ExecutionRequest, ExecutionResult, Executor, UnsafeOutput, open_output
from . import trellis_train as helper

HELPER_SOURCE = Path(helper.__file__)
HELPER_NAME = "trellis_train.py"
MAX_LINE_BYTES = 4096          # a longer metrics line is not a report, it is noise
MAX_READ_PER_POLL = 1 << 20    # bytes of the metrics file read per poll
MAX_POINTS = 5000              # points of a curve kept in state.json (the trace keeps them all)
WATCH_SECONDS = 0.5
Command = Literal["pause", "cancel"]

_tracer: ContextVar[object | None] = ContextVar("trellis_training_tracer", default=None)


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
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "trellis_train" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "trellis_train":
            return True
    return False


def job_key(request: ExecutionRequest) -> str:
    """The program and what it is given: the same key means the same training."""
    h = hashlib.sha256()
    h.update(request.code.encode("utf-8"))
    h.update(json.dumps([request.entrypoint, list(request.args)]).encode())
    for rel in sorted(request.input_files):
        source = Path(request.input_files[rel])
        digest = sha256_file(source) if source.is_file() else "dir"
        h.update(f"\0{rel}\0{digest}".encode())
    return h.hexdigest()[:16]


def detect_device() -> str:
    """CUDA when this machine has a GPU torch can use, else CPU (the same program runs on both).
    TRELLIS_TRAINING_DEVICE=cpu|cuda overrides."""
    wanted = os.environ.get("TRELLIS_TRAINING_DEVICE", "").strip().lower()
    if wanted in {"cpu", "cuda"}:
        return wanted
    try:
        import torch
    except ImportError:
        return "cpu"
    try:
        return "cuda" if torch.cuda.is_available() else "cpu"
    except Exception:  # noqa: BLE001 - a broken driver is a machine without a GPU
        return "cpu"


@dataclass
class JobState:
    key: str
    purpose: str = ""
    status: str = "queued"   # queued, running, ok, error, timeout, memory, violation, killed, paused, cancelled
    device: str = "cpu"
    started: float = 0.0
    updated: float = 0.0
    epoch: int | None = None
    epochs: int | None = None
    best_val: float | None = None
    eta_s: float | None = None
    checkpoint: dict | None = None   # {"name", "sha256", "bytes", "epoch"} of the last one kept
    points: list[dict] = field(default_factory=list)
    runs: int = 0                    # how many times the program was started (resumes included)
    first_epoch: int = 0             # the epoch this start began at (after the checkpoint it was handed)

    def to_dict(self) -> dict:
        return dict(vars(self))

    @classmethod
    def from_dict(cls, data: dict) -> "JobState":
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)


class JobFolder:
    """One job's folder: its state, its command, its checkpoints."""

    def __init__(self, root: Path, key: str) -> None:
        self.key = key
        self.path = Path(root) / key
        self.path.mkdir(parents=True, exist_ok=True)
        self.store = ArtifactStore(self.path / "checkpoints")

    def load(self) -> JobState:
        try:
            return JobState.from_dict(json.loads((self.path / "state.json").read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError):
            return JobState(self.key)

    def save(self, state: JobState) -> None:
        fd, tmp = tempfile.mkstemp(dir=self.path, prefix=".state-")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(state.to_dict(), fh)
        os.replace(tmp, self.path / "state.json")

    def command(self) -> Command | None:
        try:
            text = (self.path / "control").read_text(encoding="utf-8").strip()
        except OSError:
            return None
        return text if text in ("pause", "cancel") else None

    def send(self, command: Command | None) -> None:
        """A person's pause or cancel (None clears it, before a resume)."""
        target = self.path / "control"
        if command is None:
            target.unlink(missing_ok=True)
        else:
            target.write_text(command, encoding="utf-8")

    def checkpoint_file(self, state: JobState) -> Path | None:
        if not state.checkpoint:
            return None
        path = self.store.path_for(state.checkpoint["sha256"])
        return path if path.is_file() else None


def list_jobs(root: Path) -> list[JobState]:
    """Every job of a run, newest first (for the studio's job list and the CLI)."""
    root = Path(root)
    states = [JobFolder(root, p.name).load() for p in root.iterdir() if (p / "state.json").is_file()] \
        if root.is_dir() else []
    return sorted(states, key=lambda s: s.started, reverse=True)


class _Watcher:
    """Called by the executor every ~0.5 s with the program's working folder: turns the new lines
    of its metrics file into events and keeps its checkpoints; says stop when a person asked."""

    def __init__(self, folder: JobFolder, state: JobState, emit: Callable[[Payload], None],
                 max_checkpoint_bytes: int) -> None:
        self.folder, self.state, self.emit = folder, state, emit
        self.max_checkpoint_bytes = max_checkpoint_bytes
        self.offset = 0
        self.pending = b""
        self.stopped_by: Command | None = None
        self.next_poll = 0.0
        self.lock = threading.Lock()

    def __call__(self, workdir: Path) -> bool:
        now = time.monotonic()
        if now < self.next_poll:
            return self.stopped_by is not None
        self.next_poll = now + WATCH_SECONDS
        self.drain(workdir)
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
        self.emit(TrainingProgress(job=s.key, epoch=epoch, step=_int(entry.get("step")), epochs=s.epochs,
                                   eta_s=s.eta_s, extra=extra, **values))
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


class TrainingExecutor:
    """Runs training programs as jobs, and everything else as ``inner`` would.

    ``root``: where the jobs' folders are (``<run>/training``). ``device``: "auto" (CUDA when
    present, else CPU), "cpu" or "cuda". ``dispatch``: how the program is started; by default
    here, in this process (the studio passes one that sends it to a Celery ``training`` queue)."""

    def __init__(self, inner: Executor, root: Path, *, device: str = "auto",
                 dispatch: Callable[[ExecutionRequest, JobFolder], ExecutionResult] | None = None) -> None:
        self.inner = inner
        self.root = Path(root)
        self.device = detect_device() if device == "auto" else device
        self.dispatch = dispatch

    @property
    def name(self) -> str:
        return self.inner.name

    def __getattr__(self, attr: str):  # the inner executor's other attributes (root, python, ...)
        return getattr(self.inner, attr)

    def run(self, request: ExecutionRequest) -> ExecutionResult:
        if not is_training_program(request.code):
            return self.inner.run(request)
        return self.run_job(request)

    def run_job(self, request: ExecutionRequest, purpose: str = "") -> ExecutionResult:
        folder = JobFolder(self.root, job_key(request))
        state = folder.load()
        tracer = _tracer.get()

        def emit(payload: Payload) -> None:
            if tracer is not None:
                tracer.emit(payload, "trainer")

        resume = folder.checkpoint_file(state)
        state.status, state.device, state.purpose = "running", self.device, purpose or state.purpose
        state.started, state.runs = time.time(), state.runs + 1
        state.first_epoch = (state.checkpoint.get("epoch") or -1) + 1 if resume and state.checkpoint else 0
        folder.save(state)
        folder.send(None)  # a new start clears the command that stopped the last one
        emit(TrainingStarted(job=state.key, purpose=purpose, device=self.device,
                             resumed_from=state.checkpoint["sha256"] if resume else None,
                             resumed_epoch=state.checkpoint.get("epoch") if resume else None))
        watcher = _Watcher(folder, state, emit, request.limits.max_file_mb * 1024 * 1024)
        with tempfile.TemporaryDirectory(prefix="trellis-job-") as tmp:
            job_file = Path(tmp) / helper.JOB_FILE
            job_file.write_text(json.dumps({
                "device": self.device, "job": state.key,
                "resume": state.checkpoint["name"] if resume and state.checkpoint else None,
                "resumed_epoch": state.checkpoint.get("epoch") if resume and state.checkpoint else None}))
            inputs = {**request.input_files, HELPER_NAME: HELPER_SOURCE, helper.JOB_FILE: job_file}
            if resume is not None:
                inputs[f"{helper.RESUME_DIR}/{state.checkpoint['name']}"] = resume
            job_request = replace(request, input_files=inputs, watch=watcher)
            started = time.monotonic()
            result = (self.dispatch or _here(self.inner))(job_request, folder)
        watcher.drain(result.workdir)  # what it wrote after the last poll
        stopped = watcher.stopped_by or folder.command()
        if stopped and not result.ok:
            state.status = "paused" if stopped == "pause" else "cancelled"
            result.stderr += f"\ntrellis: the training job was {state.status} by a person\n"
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
        return result


def _here(inner: Executor) -> Callable[[ExecutionRequest, JobFolder], ExecutionResult]:
    return lambda request, folder: inner.run(request)


def training_executor(inner: Executor, run_dir: Path, device: str = "auto") -> Executor:
    """``inner`` able to run training jobs, their folders under ``<run_dir>/training`` (an executor
    that already is one is returned as it is)."""
    if isinstance(inner, TrainingExecutor):
        return inner
    return TrainingExecutor(inner, Path(run_dir) / "training", device=device)
