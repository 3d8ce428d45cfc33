"""A training worker's side of a job ticket (engine/training/remote.py): run the job the ticket
names, in the sandbox the run itself would have used, its events appended to the ticket."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from ..protocol.events import Payload
from ..sandbox import Executor
from ..sandbox.select import make_executor
from ..sandbox.subprocess_executor import SubprocessExecutor
from .folder import JobFolder, decode_request
from .jobs import TrainingExecutor
from .remote import Beat, Ticket, encode_result, job_lock, write_json


def work(spec: dict, make_executor: Callable[[str, Path], Executor] | None = None, device: str = "auto",
         also: Callable[[Payload], None] | None = None) -> str:
    """Run one ticket in this (training worker's) process. Returns what became of it: "ok" (or the
    program's status), "paused" (a person paused the job: the ticket stays open for a resume),
    "skipped" (finished already, or no run waits on it any more). ``also`` gets every event
    too (a job no run waits on is shown live by the studio this way)."""
    folder = JobFolder(Path(spec["root"]), spec["key"])
    ticket = Ticket(folder, spec["ticket"])
    if ticket.finished or ticket.abandoned or not ticket.spec_file.is_file():
        return "skipped"
    with job_lock(folder, ticket) as mine:
        if not mine:
            return "skipped"
        inner = (make_executor or _executor)(spec["executor"], Path(spec["sandbox_root"]))
        executor = TrainingExecutor(inner, Path(spec["root"]), device=spec.get("device") or device)
        request = decode_request(spec["request"])
        def emit(payload: Payload) -> None:
            ticket.append(payload)
            if also is not None:
                also(payload)

        with Beat(ticket):
            result = executor.run_job(request, spec.get("purpose") or "", emit=emit, node=spec.get("node"))
        state = folder.load()
        if state.status == "paused" and folder.command() in ("pause", "stop"):
            return "paused"  # resumed by a person (the ticket is sent again) or by the run's next start
        write_json(ticket.result_file, encode_result(result))
        return state.status


def _executor(kind: str, root: Path) -> Executor:
    """The sandbox the run itself would have used, under the same root (both sides share it)."""
    if kind == "subprocess":
        return SubprocessExecutor(root)
    return make_executor(kind, root).executor
