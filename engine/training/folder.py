"""A training job's folder, which both the run that waits on a job and the worker that runs it
read and write (engine/training/jobs.py runs jobs, remote.py hands them to a worker):
``state.json`` (status, device, epochs, last checkpoint, the curve's points), ``control`` (a
person's pause or cancel, the engine's stop), ``checkpoints/`` (the artifact store) and, for a job
resumable with nobody waiting, ``request.json``. Also the job's key (what makes two trainings the
same) and the request as it travels."""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Literal, Protocol

from ..artifacts import ArtifactStore, sha256_file
from ..protocol.events import Payload, TrainingFinished
from ..sandbox import ExecutionLimits, ExecutionRequest, ExecutionResult, Executor

MAX_KEPT_INPUTS = 64 << 20     # bytes of inputs a job keeps to be resumed with nobody waiting on it
# pause and cancel are a person's; stop is the engine's own when the run that waited on the job
# stopped (it is cleared when the program is started again, a person's commands are not)
Command = Literal["pause", "cancel", "stop"]
COMMANDS = ("pause", "cancel", "stop")
class JobHost(Protocol):
    """Where a run's training jobs go when it is not this process (the studio: a Celery
    ``training`` queue, webapp/runs/training.py), and what the run does while it waits."""

    def slots(self) -> int:
        """Training jobs the host can run at once now (0: none, the job runs here)."""
        ...

    def send(self, spec: dict) -> None:
        """Queue one job ticket (engine/training/remote.py) for a training worker."""
        ...

    def waiting(self) -> None:
        """Called a few times a second while the run waits on a job (queued, training or paused):
        raise (RunInterrupted) to stop waiting; the job is stopped and keeps its checkpoint."""
        ...


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


@dataclass
class JobState:
    key: str
    purpose: str = ""
    node: str | None = None          # the tree node whose program it is
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
        return text if text in COMMANDS else None

    def send(self, command: Command | None) -> None:
        """A person's pause or cancel, the engine's stop (None clears it: a resume)."""
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


    def keep_request(self, request: ExecutionRequest, executor: Executor) -> bool:
        """Keep what it takes to run the job again with no run waiting on it (a person's resume
        of a cancelled job): the request, its inputs copied into the job's store (a validation
        fold's files vanish with the fold), the sandbox it ran in. False when the inputs are
        folders or over MAX_KEPT_INPUTS: such a job resumes only with its run."""
        sources = {rel: Path(path) for rel, path in request.input_files.items()}
        if not all(p.is_file() for p in sources.values()) or \
                sum(p.stat().st_size for p in sources.values()) > MAX_KEPT_INPUTS:
            (self.path / "request.json").unlink(missing_ok=True)
            return False
        inputs = {rel: str(self.store.path_for(self.store.put_file(p))) for rel, p in sources.items()}
        data = {**encode_request(request), "input_files": inputs, "executor": executor.name,
                "sandbox_root": str(getattr(executor, "root", "") or "")}
        fd, tmp = tempfile.mkstemp(dir=self.path, prefix=".request-")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh)
        os.replace(tmp, self.path / "request.json")
        return True

    def kept_request(self) -> dict | None:
        """What ``keep_request`` kept (an encoded request, its executor and sandbox), or None."""
        try:
            data = json.loads((self.path / "request.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) and data.get("sandbox_root") else None


def encode_request(request: ExecutionRequest) -> dict:
    """The request as JSON (it travels to a training worker, or waits in the job's folder)."""
    return {"code": request.code, "input_files": {rel: str(path) for rel, path in request.input_files.items()},
            "limits": asdict(request.limits), "args": list(request.args), "entrypoint": request.entrypoint}


def decode_request(data: dict) -> ExecutionRequest:
    return ExecutionRequest(code=data["code"], input_files={rel: Path(p) for rel, p in data["input_files"].items()},
                            limits=ExecutionLimits(**data["limits"]), args=tuple(data["args"]),
                            entrypoint=data["entrypoint"])


def list_jobs(root: Path) -> list[JobState]:
    """Every job of a run, newest first (for the studio's job list and the CLI)."""
    root = Path(root)
    states = [JobFolder(root, p.name).load() for p in root.iterdir() if (p / "state.json").is_file()] \
        if root.is_dir() else []
    return sorted(states, key=lambda s: s.started, reverse=True)


def not_run(folder: JobFolder, why: str) -> ExecutionResult:
    """The execution of a job that did not run (a person paused or cancelled it first)."""
    empty = folder.path / "not-run"
    empty.mkdir(exist_ok=True)
    return ExecutionResult(status="killed", exit_code=None, stdout="", stderr=f"trellis: {why}\n",
                           duration_s=0.0, workdir=empty, files={}, executor="training")


def cancelled_while_paused(folder: JobFolder, emit: Callable[[Payload], None]) -> ExecutionResult:
    """A paused job cancelled before it ran again: nobody else will say so, so the waiting run does."""
    state = folder.load()
    state.status, state.updated, state.eta_s = "cancelled", time.time(), None
    folder.save(state)
    emit(TrainingFinished(job=state.key, status="cancelled", epochs=None if state.epoch is None else state.epoch + 1,
                          best_val=state.best_val, last_checkpoint=(state.checkpoint or {}).get("sha256"),
                          duration_s=0.0))
    return not_run(folder, "the training job was cancelled by a person while it was paused")
