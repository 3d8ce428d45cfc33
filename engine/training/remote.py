"""A training job run by another process (a training worker), and the run that waits for it.

The run's process writes a *ticket* into the job's folder (``<job>/tickets/<id>/spec.json``: the
program, its inputs, its limits, where the sandboxes are) and hands it to its ``JobHost``
(the studio: a Celery task on the ``training`` queue). A training worker runs the job there
with ``work`` (worker.py): the same ``TrainingExecutor.run_job`` as a job run in place, its events appended
to the ticket's ``events.jsonl`` and its execution written to ``result.json`` when it ends. The
run tails the events into its own trace (live curves, checkpoints) and returns the result, so
nothing above the executor knows where the program ran. Both sides share only the run's folder.

Delivery is at least once (a worker killed with ``kill -9`` has its ticket delivered again, and
the run sends it again when the worker's beat stops): ``work`` skips a ticket that is finished
or abandoned, and one job runs in one process at a time (an ``flock`` on the job's folder, let
go by the kernel when its holder dies), resuming from the last checkpoint the job kept.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

from ..protocol.events import Payload, PayloadError, parse_payload
from ..sandbox import ExecutionRequest, ExecutionResult
from .folder import JobFolder, JobHost, cancelled_while_paused, encode_request, job_key

if TYPE_CHECKING:  # the executor that waits here (jobs.py imports this module to hand it jobs)
    from .jobs import TrainingExecutor

TRAINING_KINDS = ("training_started", "training_progress", "training_checkpoint", "training_finished")
POLL_S = 0.25              # how often the waiting run reads the ticket
BEAT_S = 2.0               # how often a worker working a ticket says it is alive
LOST_AFTER_S = 30.0        # a ticket whose worker has been silent this long is sent again
STOP_WAIT_S = 10.0         # how long a run that stops waiting gives its job to stop and say so
MAX_EVENT_LINE = 64 * 1024


class Ticket:
    """One hand-over of a job to a training worker: ``<job>/tickets/<id>/``."""

    def __init__(self, folder: JobFolder, ticket: str) -> None:
        if not ticket.isalnum() or len(ticket) > 40:
            raise ValueError(f"not a ticket id: {ticket[:60]!r}")
        self.folder = folder
        self.id = ticket
        self.path = folder.path / "tickets" / ticket

    @classmethod
    def new(cls, folder: JobFolder) -> "Ticket":
        ticket = cls(folder, uuid.uuid4().hex[:16])
        ticket.path.mkdir(parents=True)
        return ticket

    spec_file = property(lambda self: self.path / "spec.json")
    events_file = property(lambda self: self.path / "events.jsonl")
    result_file = property(lambda self: self.path / "result.json")
    abandoned_file = property(lambda self: self.path / "abandoned")
    beat_file = property(lambda self: self.path / "alive")

    def spec(self) -> dict:
        return json.loads(self.spec_file.read_text(encoding="utf-8"))

    @property
    def finished(self) -> bool:
        return self.result_file.is_file()

    @property
    def abandoned(self) -> bool:
        return self.abandoned_file.exists()

    @property
    def open(self) -> bool:
        """A run waits on it: sent, and neither finished nor given up."""
        return self.spec_file.is_file() and not self.finished and not self.abandoned

    def append(self, payload: Payload) -> None:
        """One event, one write of one line (O_APPEND): a worker killed mid-way leaves whole lines."""
        line = json.dumps({"kind": payload.kind, "payload": payload.to_payload()}).encode() + b"\n"
        fd = os.open(self.events_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)


def open_tickets(folder: JobFolder) -> list[Ticket]:
    """The tickets of a job that a run still waits on (normally none or one): sent to a training
    worker, or marking a run that runs the job itself (``waiting_here``)."""
    root = folder.path / "tickets"
    if not root.is_dir():
        return []
    tickets = [Ticket(folder, p.name) for p in root.iterdir() if p.name.isalnum()]
    return [t for t in tickets if t.open]


@contextlib.contextmanager
def waiting_here(folder: JobFolder) -> Iterator[Ticket]:
    """A ticket saying that a run runs this job in its own process and waits on it (so a
    person's resume of the paused job only lifts the pause: that run starts it again)."""
    ticket = Ticket.new(folder)
    write_json(ticket.spec_file, {"mode": "here", "key": folder.key, "ticket": ticket.id})
    try:
        yield ticket
    finally:
        ticket.abandoned_file.touch()


# --- what travels: the request and the result, as JSON --------------------------------------------------
def encode_result(result: ExecutionResult) -> dict:
    return {"status": result.status, "exit_code": result.exit_code, "stdout": result.stdout, "stderr": result.stderr,
            "duration_s": result.duration_s, "workdir": str(result.workdir), "files": dict(result.files),
            "violations": list(result.violations), "executor": result.executor}


def decode_result(data: dict) -> ExecutionResult:
    return ExecutionResult(status=data["status"], exit_code=data["exit_code"], stdout=data["stdout"],
                           stderr=data["stderr"], duration_s=data["duration_s"], workdir=Path(data["workdir"]),
                           files=dict(data["files"]), violations=list(data["violations"]), executor=data["executor"])


def write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    os.replace(tmp, path)


# --- the run's side -------------------------------------------------------------------------------------
class _Tail:
    """The new whole lines of a ticket's events file, as typed training payloads."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset, self.pending = path, 0, b""

    def read(self) -> list[Payload]:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read(1 << 20)
        except FileNotFoundError:
            return []
        self.offset += len(data)
        lines = (self.pending + data).split(b"\n")
        self.pending = lines.pop()[-MAX_EVENT_LINE:]
        out = []
        for line in lines:
            try:
                entry = json.loads(line)
                if entry.get("kind") in TRAINING_KINDS:
                    out.append(parse_payload(entry["kind"], entry.get("payload") or {}))
            except (ValueError, AttributeError, PayloadError):
                continue  # a torn or foreign line is not an event
        return out


def wait_for_job(executor: TrainingExecutor, request: ExecutionRequest, host: JobHost,
                 emit: Callable[[Payload], None], *, purpose: str = "", node: str | None = None) -> ExecutionResult:
    """Send the job to ``host`` and wait for it, its events forwarded to ``emit``. A paused job
    is waited on until a person resumes it (the studio sends the ticket again) or cancels it;
    when ``host.waiting`` raises, the job is stopped (it keeps its checkpoint) and so is this."""
    folder = JobFolder(executor.root, job_key(request))
    ticket = Ticket.new(folder)
    spec = {"root": str(executor.root), "key": folder.key, "ticket": ticket.id, "purpose": purpose, "node": node,
            "device": executor._device, "executor": executor.inner.name, "sandbox_root": str(executor.inner.root),
            "request": encode_request(request)}
    write_json(ticket.spec_file, spec)
    host.send(spec)
    tail = _Tail(ticket.events_file)
    sent_at = time.time()
    try:
        while True:
            for payload in tail.read():
                emit(payload)
            if ticket.finished:
                for payload in tail.read():
                    emit(payload)
                return decode_result(json.loads(ticket.result_file.read_text(encoding="utf-8")))
            state = folder.load()
            if state.status == "paused" and folder.command() == "cancel":
                ticket.abandoned_file.touch()  # no worker holds a paused job to say so: the run does
                return cancelled_while_paused(folder, emit)
            if state.status != "paused" and time.time() - max(_beat(ticket), sent_at) > LOST_AFTER_S \
                    and ticket.beat_file.exists():
                host.send(spec)  # its worker went silent (killed whole): another takes it, from the checkpoint
                sent_at = time.time()
            host.waiting()
            time.sleep(POLL_S)
    except BaseException:
        # The run stops waiting: a worker must not start the ticket now, and one running it stops;
        # what it says as it stops (its last checkpoint, "paused") still goes into the trace.
        ticket.abandoned_file.touch()
        if not ticket.finished and folder.command() is None:
            folder.send("stop")
        deadline = time.monotonic() + STOP_WAIT_S
        while folder.load().status == "running" and time.monotonic() < deadline and not ticket.finished:
            time.sleep(POLL_S)
        for payload in tail.read():
            emit(payload)
        raise


def _beat(ticket: Ticket) -> float:
    try:
        return ticket.beat_file.stat().st_mtime
    except OSError:
        return 0.0


def resend(folder: JobFolder, send: Callable[[dict], None]) -> bool:
    """A person resumed a paused job a run waits on: clear the command and send the run's ticket
    again (a run that runs the job itself starts it again by itself). False when no run waits."""
    tickets = open_tickets(folder)
    if not tickets:
        return False
    folder.send(None)
    for ticket in tickets:
        spec = ticket.spec()
        if spec.get("mode") != "here":
            send(spec)
    return True


def send_alone(folder: JobFolder, send: Callable[[dict], None], **labels: object) -> Ticket | None:
    """A person resumed a job no run waits on (cancelled, or stopped with its run): a ticket of
    its own, from the request the job kept, sent to a training worker; the job goes on from its
    last checkpoint and keeps what it trains. None when the job kept no request."""
    kept = folder.kept_request()
    if kept is None:
        return None
    state = folder.load()
    ticket = Ticket.new(folder)
    request = {k: kept[k] for k in ("code", "input_files", "limits", "args", "entrypoint")}
    spec = {"root": str(folder.path.parent), "key": folder.key, "ticket": ticket.id, "purpose": state.purpose,
            "node": state.node, "device": None, "executor": kept["executor"], "sandbox_root": kept["sandbox_root"],
            "request": request, "alone": True, **labels}
    write_json(ticket.spec_file, spec)
    folder.send(None)
    send(spec)
    return ticket


# --- the training worker's side ---------------------------------------------------------------------------
@contextlib.contextmanager
def job_lock(folder: JobFolder, ticket: Ticket) -> Iterator[bool]:
    """The job's lock, waited for while another process runs the same job; False when the
    ticket was settled meanwhile (nothing left to do)."""
    fd = os.open(folder.path / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if ticket.finished or ticket.abandoned:
                    yield False
                    return
                time.sleep(0.5)
        yield not (ticket.finished or ticket.abandoned)
    finally:
        os.close(fd)  # lets go of the lock


class Beat:
    """Touches the ticket's beat file while the worker works it."""

    def __init__(self, ticket: Ticket) -> None:
        self.ticket, self.stop = ticket, threading.Event()
        self.thread = threading.Thread(target=self._loop, name="trellis-job-beat", daemon=True)

    def _loop(self) -> None:
        while not self.stop.is_set():
            with contextlib.suppress(OSError):
                self.ticket.beat_file.touch()
            self.stop.wait(BEAT_S)

    def __enter__(self) -> "Beat":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(5)
