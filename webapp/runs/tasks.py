"""Celery tasks: the engine runs here, in a worker, never in the web process."""
from __future__ import annotations

import io
import logging
import threading
import traceback
from typing import TextIO

from billiard.exceptions import WorkerLostError
from celery import shared_task
from celery.signals import task_failure
from celery.worker import state as worker_state
from django.conf import settings
from django.db import connection
from django.utils import timezone

import engine.evolve
from engine.disk_space import caused_by_full_disk
from engine.errors import AwaitingDecision, RunInterrupted, TrellisError
from engine.models import ModelSettings
from webapp import disk

from webapp.library import project as project_library

from . import interrupt, live, model_policy
from .bridge import DatabaseGate, RunControl, RunEventSink, broadcast, close_moot, moot_reason
from .models import Run, RunStatus

log = logging.getLogger(__name__)


@shared_task(name="webapp.runs.tasks.execute_run")
def execute_run(run_id: int, lease: str, out: TextIO | None = None) -> str:
    """Run (or resume) one evolving run. Returns its final status. ``out`` (a direct call from
    the command line, never through the queue) receives the search's progress lines."""
    space = disk.state()
    if space.full:  # not started: it would fail at its first write, with nobody told why
        if Run.objects.filter(pk=run_id, lease=lease, status=RunStatus.QUEUED).update(
                status=RunStatus.PAUSED, status_reason=space.message()):
            broadcast(Run.objects.get(pk=run_id), live.status_message(RunStatus.PAUSED, space.message()))
            return RunStatus.PAUSED
        return "skipped"
    claimed = Run.objects.filter(pk=run_id, lease=lease, status=RunStatus.QUEUED).update(
        status=RunStatus.RUNNING, heartbeat=timezone.now(), status_reason="")
    if not claimed:  # cancelled before it started, or superseded by a newer resume
        return "skipped"
    run = Run.objects.select_related("task").get(pk=run_id)
    if run.checkpoint:
        # Scores of an iteration the lost worker never finished would be duplicated by the rerun;
        # its events stay in the trace. A checkpoint taken mid-iteration (a proposal waiting for
        # the gate) keeps that iteration's probe, and so its score.
        in_progress = run.checkpoint.get("iteration") or {}
        run.judgements.filter(iteration__gt=in_progress.get("n", run.checkpoint.get("n", 0))).delete()
    Run.objects.filter(pk=run_id).update(attempts=run.attempts + 1, started=run.started or timezone.now())
    broadcast(run, live.status_message(RunStatus.RUNNING))
    sink = RunEventSink(run, lease)
    log_out = out or io.StringIO()
    with Heartbeat(run_id, lease):
        return _execute(run, lease, sink, log_out)


class Heartbeat:
    """Beats the run's heartbeat while its worker works, whatever the engine writes: a step may
    go a minute without an event (a long program, a slow model), and a page would then call a
    healthy run "worker lost" and let a person resume it away from its worker."""

    def __init__(self, run_id: int, lease: str, interval_s: float | None = None):
        self.run_id, self.lease = run_id, lease
        self.interval_s = interval_s or max(1.0, settings.TRELLIS_HEARTBEAT_STALE_S / 3)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._beat, name=f"trellis-heartbeat-{run_id}", daemon=True)

    def _beat(self) -> None:
        try:
            while not self.stop.wait(self.interval_s):
                try:
                    if not Run.objects.filter(pk=self.run_id, lease=self.lease).update(heartbeat=timezone.now()):
                        return  # the run was taken over (resumed elsewhere) or settled
                except Exception:  # noqa: BLE001 - a busy database: the next beat tries again
                    log.warning("run %s: heartbeat not written", self.run_id, exc_info=True)
        finally:
            connection.close()  # this thread's own connection

    def __enter__(self) -> "Heartbeat":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(timeout=5)


def _execute(run: Run, lease: str, sink: RunEventSink, log_out: TextIO) -> str:
    run_id = run.pk
    try:
        # Held to the operator's policy as it stands now: settings saved before it changed, and
        # an agent's own endpoint in an edited workflow, are refused here before any request.
        models = ModelSettings.from_dict(run.model_settings).bounded(model_policy.policy_for(run.task.project))
        with interrupt.armed():  # a person's pause or cancel lands mid-step too
            result = engine.evolve.evolve(run.task.folder, run.spec(models), out=log_out,
                            gate=DatabaseGate(run, lease, moot_reason(run)), control=RunControl(run, lease), archive_dir=settings.TRELLIS_ARCHIVE_DIR, sinks=[sink],
                            run_dir=run.run_dir, resume=run.checkpoint, on_checkpoint=sink.save_checkpoint,
                            library=project_library.run_library(run.task.project))
        # a final workflow without an official score (it delivered nothing evaluate.py accepts) failed
        status = RunStatus.FAILED if result.failed else RunStatus.COMPLETED
        reason, extra = result.failed or result.stopped, {"result": result.to_dict()}
    except AwaitingDecision as exc:
        # Suspended, not finished: the gate marked the run awaiting and the proposal is in its
        # checkpoint; this worker is free, and the decision sends the run back to the queue.
        log.info("run %s suspended: %s", run_id, exc)
        return "awaiting"
    except RunInterrupted as exc:
        if exc.reason.startswith("lease lost"):
            return "superseded"
        status = RunStatus.CANCELLED if exc.reason == "cancelled" else RunStatus.PAUSED
        reason, extra = exc.reason, {}
    except TrellisError as exc:  # a model that cannot be called, a search that committed to nothing:
        log.warning("run %s failed: %s", run_id, exc)  # the engine's words, no traceback
        status, reason, extra = RunStatus.FAILED, str(exc), {}
    except Exception as exc:  # noqa: BLE001 - any failure is recorded on the run, which stays resumable
        if caused_by_full_disk(exc):
            log.error("run %s paused: the disk is full (%s)", run_id, exc)
            disk.reserve().release()  # room for the writes below
            status, reason, extra = RunStatus.PAUSED, _disk_full_reason(exc), {}
        else:
            log.exception("run %s failed", run_id)
            status, reason = RunStatus.FAILED, f"{type(exc).__name__}: {exc}\n\n{traceback.format_exc()[-4000:]}"
            extra = {}
    settled, status, reason = _settle(run_id, lease, status=status, status_reason=reason, finished=timezone.now()
                                      if status in {RunStatus.COMPLETED, RunStatus.CANCELLED} else None, **extra)
    if settled and status in {RunStatus.COMPLETED, RunStatus.CANCELLED}:  # nothing waits for a person any more
        close_moot(run_id, f"the run was {status} before a decision on it")
        Run.objects.get(pk=run_id).versions.filter(adopted=False, outcome="").update(
            outcome=f"refused: the run was {status} before it could adopt it")
    broadcast(run, live.status_message(status, reason))
    return status


def _disk_full_reason(exc: BaseException) -> str:
    space = disk.state()
    return (f"Disk full: a write failed for want of space ({exc}); the run is paused at its last checkpoint. "
            f"{space.free_mb} MB are free where Trellis keeps its data ({space.path}); free some space, then "
            "resume it.")


def _settle(run_id: int, lease: str, **fields) -> tuple[int, str, str]:
    """Record how the run ended; when that write itself finds the disk full, give back the reserve
    and say so instead (a run left "running" on a full disk is what nobody could understand)."""
    try:
        return Run.objects.filter(pk=run_id, lease=lease).update(**fields), fields["status"], fields["status_reason"]
    except Exception as exc:  # noqa: BLE001 - only a full disk is handled here
        if not caused_by_full_disk(exc) or not disk.reserve().release():
            raise
        fields.update(status=RunStatus.PAUSED, status_reason=_disk_full_reason(exc), finished=None)
        fields.pop("result", None)
        return Run.objects.filter(pk=run_id, lease=lease).update(**fields), fields["status"], fields["status_reason"]


@task_failure.connect(sender=execute_run)
def _process_lost(sender=None, exception=None, args=(), **_):
    """In the worker's main process, when the pool process executing a run died (kill -9, OOM):
    the run is marked interrupted at once, with the reason, and a person resumes it. Not resumed
    automatically: the run itself may be what kills its process."""
    if worker_state.should_stop or worker_state.should_terminate:
        return  # the worker itself is stopping: the studio resumes its runs when it starts again
    if isinstance(exception, WorkerLostError) and len(args) == 2:
        mark_lost(args[0], args[1], f"the process executing the run died ({exception}); "
                                    "resume continues after its last finished iteration")


def mark_lost(run_id: int, lease: str, reason: str) -> str | None:
    """The process executing a run died under it (its worker saw it go): the run, if that lease
    still holds it, settles as a person asked (pausing -> paused, cancelling -> cancelled) or
    becomes interrupted, resumable at once instead of after a stale heartbeat. Returns the new
    status, None when the run had moved on."""
    held = Run.objects.filter(pk=run_id, lease=lease)
    if held.filter(status=RunStatus.PAUSING).update(status=RunStatus.PAUSED, status_reason="paused"):
        status = RunStatus.PAUSED
    elif held.filter(status=RunStatus.CANCELLING).update(status=RunStatus.CANCELLED, finished=timezone.now()):
        status = RunStatus.CANCELLED
        close_moot(run_id, "the run was cancelled before a decision on it")
    elif held.filter(status__in=[RunStatus.QUEUED, RunStatus.RUNNING]).update(
            status=RunStatus.INTERRUPTED, status_reason=reason):
        status = RunStatus.INTERRUPTED
    else:
        return None
    broadcast(run_id, live.status_message(status, reason))
    return status
