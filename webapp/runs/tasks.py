"""Celery tasks: the engine runs here, in a worker, never in the web process."""
from __future__ import annotations

import io
import logging
import traceback

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from engine.budget import Budget
from engine.errors import ModelUnavailable, RunInterrupted

from .bridge import DatabaseGate, RunEventSink, broadcast
from .models import Run, RunStatus

log = logging.getLogger(__name__)


@shared_task(name="webapp.runs.tasks.execute_run")
def execute_run(run_id: int, lease: str) -> str:
    """Run (or resume) one evolving run. Returns its final status."""
    claimed = Run.objects.filter(pk=run_id, lease=lease, status=RunStatus.QUEUED).update(
        status=RunStatus.RUNNING, heartbeat=timezone.now(), status_reason="")
    if not claimed:  # cancelled before it started, or superseded by a newer resume
        return "skipped"
    run = Run.objects.select_related("task").get(pk=run_id)
    if run.checkpoint:
        # Scores of an iteration the lost worker never finished would be duplicated by the rerun;
        # its events stay in the trace.
        run.judgements.filter(iteration__gt=run.checkpoint.get("n", 0)).delete()
    Run.objects.filter(pk=run_id).update(attempts=run.attempts + 1, started=run.started or timezone.now())
    broadcast(run, {"kind": "status", "status": RunStatus.RUNNING})
    sink = RunEventSink(run, lease)
    log_out = io.StringIO()
    try:
        from engine.evolve import evolve

        result = evolve(run.task.folder, search=run.search, iterations=run.iterations, seed=run.seed,
                        budget=Budget(max_tokens=run.max_tokens), out=log_out,
                        gate=DatabaseGate(run, sink), model_override=run.model or None,
                        archive_dir=settings.TRELLIS_ARCHIVE_DIR, sinks=[sink], run_dir=run.run_dir,
                        resume=run.checkpoint,  # only Mimosa and SciMARS write checkpoints
                        on_checkpoint=sink.save_checkpoint)
        status, reason, extra = RunStatus.COMPLETED, result.stopped, {"result": result.to_dict()}
    except RunInterrupted as exc:
        if exc.reason.startswith("lease lost"):
            return "superseded"
        status = RunStatus.CANCELLED if exc.reason == "cancelled" else RunStatus.PAUSED
        reason, extra = exc.reason, {}
    except ModelUnavailable as exc:  # a configuration problem, not a bug: the provider's words, no traceback
        log.warning("run %s failed: %s", run_id, exc)
        status, reason, extra = RunStatus.FAILED, str(exc), {}
    except Exception as exc:  # noqa: BLE001 - any failure is recorded on the run, which stays resumable
        log.exception("run %s failed", run_id)
        status, reason = RunStatus.FAILED, f"{type(exc).__name__}: {exc}\n\n{traceback.format_exc()[-4000:]}"
        extra = {}
    Run.objects.filter(pk=run_id, lease=lease).update(
        status=status, status_reason=reason, finished=timezone.now() if status in
        {RunStatus.COMPLETED, RunStatus.CANCELLED} else None, **extra)
    broadcast(run, {"kind": "status", "status": status, "reason": reason[:300]})
    return status
