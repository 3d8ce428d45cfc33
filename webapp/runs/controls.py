"""Starting, pausing, resuming and cancelling runs: the one place that changes a run's status
from outside the worker (views, the studio command and tests all come through here)."""
from __future__ import annotations

import logging
import uuid
from datetime import timedelta
from pathlib import Path

import kombu.exceptions
import redis
from django.conf import settings
from django.db import close_old_connections, transaction
from django.db.models import Q
from django.utils import timezone

from webapp import disk
from webapp.celery import declare_queues
from webapp.tasks.models import Task

from . import interrupt, live
from .bridge import broadcast, close_moot
from .models import RESUMABLE_STATUSES, Run, RunStatus
from .tasks import execute_run

log = logging.getLogger(__name__)
# What publishing a task raises when the broker is down or was just restarted empty.
QUEUE_ERRORS = (kombu.exceptions.KombuError, redis.RedisError, OSError)


class ControlError(Exception):
    """The action does not apply to the run in its current state."""

    http_status = 409


class DiskFull(ControlError):
    """The data disk is below its floor of free space: nothing is started or queued."""

    http_status = 507


def refuse_when_disk_full() -> None:
    current = disk.state()
    if current.full:
        raise DiskFull(current.message())


class QueueUnavailable(ControlError):
    """The task queue (Redis) did not take the run: it is left interrupted, and resumable."""

    http_status = 503

    def __init__(self, run: Run, message: str):
        self.run = run
        super().__init__(message)


def _enqueue(run: Run, only: Q | None = None) -> None:
    """A new lease, then the message for a worker. The message goes once the lease is committed
    (a worker must find it); when it cannot go, the run is never left "queued" with nothing in
    the queue: it becomes interrupted, resumable, and QueueUnavailable says why (raised from
    the commit when called inside a transaction)."""
    lease = uuid.uuid4().hex
    rows = Run.objects.filter(pk=run.pk)
    if only is not None:
        rows = rows.filter(only)
    if not rows.update(lease=lease, status=RunStatus.QUEUED, heartbeat=None, status_reason=""):
        raise ControlError("the run's worker is alive and working on it (its heartbeat is fresh); "
                           "resume is for a run whose worker stopped")
    run.lease, run.status = lease, RunStatus.QUEUED
    transaction.on_commit(lambda: _publish(run, lease))


def _publish(run: Run, lease: str) -> None:
    try:
        # A short retry: the studio restarts a dead embedded Redis within a second or two.
        # the task id is the lease: a person's pause or cancel signals this attempt (interrupt.py)
        execute_run.apply_async((run.pk, lease), queue="runs", task_id=lease, retry=True,
                                retry_policy={"max_retries": 3, "interval_start": 0.2, "interval_step": 0.4,
                                              "interval_max": 1.0})
    except QUEUE_ERRORS as exc:
        log.warning("run %s: could not queue it: %s", run.pk, exc)
        reason = ("The task queue (Redis) did not answer, so the run could not be queued; "
                  "resume it once the studio is healthy (/healthz).")
        Run.objects.filter(pk=run.pk, lease=lease).update(status=RunStatus.INTERRUPTED, status_reason=reason,
                                                          lease="")
        run.status, run.status_reason, run.lease = RunStatus.INTERRUPTED, reason, ""
        raise QueueUnavailable(run, f"Run {run.pk} could not be queued: the task queue (Redis) did not answer. "
                                    "It is kept, interrupted: resume it once the studio is healthy.") from exc
    broadcast(run, live.status_message(RunStatus.QUEUED))


def _new_run(task: Task, user=None, **options) -> Run:
    run = Run.objects.create(task=task, created_by=user, **options)
    folder = Path(settings.TRELLIS_RUNS_DIR) / f"studio-{run.pk:05d}-{task.name}-{run.search}"
    if folder.exists():
        # A studio whose database was reset numbers its runs from 1 again: a new run must not
        # resume an old run's traces, nor share its evidence graph.
        folder = folder.with_name(f"{folder.name}-{uuid.uuid4().hex[:8]}")
    run.run_dir = str(folder)
    run.save(update_fields=["run_dir"])
    return run


def start_run(task: Task, user=None, **options) -> Run:
    refuse_when_disk_full()
    run = _new_run(task, user, **options)
    _enqueue(run)
    return run


def run_here(task: Task, user=None, out=None, **options) -> Run:
    """A run started from the command line (``manage.py evolve --project``): recorded as any
    studio run is (its events, versions, decisions and result are on its page, live while the
    studio is up), but executed in this process, not by a worker. A proposal its gate policy
    leaves to a person suspends it as any run; the person's decision in the studio then sends
    it to the studio's workers."""
    refuse_when_disk_full()
    run = _new_run(task, user, **options)
    lease = uuid.uuid4().hex
    Run.objects.filter(pk=run.pk).update(lease=lease, status=RunStatus.QUEUED)
    execute_run(run.pk, lease, out=out)  # a direct call: executed here, not queued
    run.refresh_from_db()
    return run


def recover_orphans() -> list[int]:
    """When the studio starts its own (only) worker, no run can still be executing: send the
    ones that were in flight back to the queue from their checkpoints and settle the ones a
    person had asked to pause or cancel. Returns the ids sent back."""
    # Awaiting runs have no worker to lose: they wait for a person, whose decision queues them.
    sent = _requeue(Run.objects.filter(status__in=[RunStatus.QUEUED, RunStatus.RUNNING]))
    Run.objects.filter(status=RunStatus.PAUSING).update(status=RunStatus.PAUSED, status_reason="paused")
    for run in Run.objects.filter(status=RunStatus.CANCELLING):
        Run.objects.filter(pk=run.pk).update(status=RunStatus.CANCELLED, finished=timezone.now())
        close_moot(run.pk, "the run was cancelled before a decision on it")
    return sent


def requeue_lost_messages() -> list[int]:
    """After the embedded Redis restarted empty, the queued runs' messages are gone: send them
    again (with new leases, so a message that survived in a worker's prefetch is skipped).
    Runs already executing keep going: their worker reconnects by itself."""
    return _requeue(Run.objects.filter(status=RunStatus.QUEUED))


def after_restart(part: str) -> list[int]:
    """What the studio's supervisor does once it restarted one of its own parts (embedded Redis
    and worker only: another broker may have other workers). Returns the runs sent again."""
    close_old_connections()
    if part == "redis":
        declare_queues()
        return requeue_lost_messages()
    if part == "worker":  # its pool processes died with it: its runs resume from their checkpoints
        return recover_orphans()
    return []


def _requeue(runs) -> list[int]:
    sent = []
    for run in runs:
        try:
            _enqueue(run)
        except QueueUnavailable as exc:  # left interrupted and resumable; the others still go
            log.warning("%s", exc)
            continue
        sent.append(run.pk)
    return sent


def pause_run(run: Run) -> None:
    if run.status == RunStatus.AWAITING:  # no worker holds it: paused at once, the proposal kept
        if Run.objects.filter(pk=run.pk, status=RunStatus.AWAITING).update(status=RunStatus.PAUSED,
                                                                           status_reason="paused", lease=""):
            run.status = RunStatus.PAUSED
            broadcast(run, live.status_message(RunStatus.PAUSED))
            return
        run.refresh_from_db()
    if run.status != RunStatus.RUNNING:
        raise ControlError(f"only a running run can be paused; this one is {run.get_status_display()}")
    _set(run, RunStatus.PAUSING)
    interrupt.signal_run(run.lease, "pause")


def after_decision(run: Run) -> bool:
    """A person decided the proposal a suspended run waits on: back to the queue, where it
    resumes at that proposal. Only from "awaiting", and atomically, so a worker that saw the
    decision first (and went on) and this never both run it. True when it was sent."""
    lease = uuid.uuid4().hex
    if not Run.objects.filter(pk=run.pk, status=RunStatus.AWAITING).update(
            lease=lease, status=RunStatus.QUEUED, heartbeat=None, status_reason=""):
        return False
    run.lease, run.status = lease, RunStatus.QUEUED
    transaction.on_commit(lambda: _publish(run, lease))
    return True


def resume_run(run: Run) -> None:
    if not run.can_resume:
        raise ControlError(f"this run is {run.get_status_display()}; only a paused, failed or interrupted run resumes")
    refuse_when_disk_full()
    # Checked again as the row is written: a worker that beat since the page was read keeps its run.
    stale = timezone.now() - timedelta(seconds=settings.TRELLIS_HEARTBEAT_STALE_S)
    lost = Q(status__in=[RunStatus.RUNNING, RunStatus.PAUSING, RunStatus.CANCELLING]) & (
        Q(heartbeat__isnull=True) | Q(heartbeat__lt=stale))
    _enqueue(run, only=Q(status__in=RESUMABLE_STATUSES) | lost)


def cancel_run(run: Run) -> None:
    if run.status in {RunStatus.RUNNING, RunStatus.PAUSING} and not run.worker_lost:
        _set(run, RunStatus.CANCELLING)
        interrupt.signal_run(run.lease, "cancel")
    elif run.status in {RunStatus.QUEUED, RunStatus.AWAITING, RunStatus.PAUSED, RunStatus.INTERRUPTED,
                        RunStatus.FAILED} or run.worker_lost:
        Run.objects.filter(pk=run.pk).update(status=RunStatus.CANCELLED, finished=timezone.now(), lease="")
        close_moot(run.pk, "the run was cancelled before a decision on it")
        broadcast(run, live.status_message(RunStatus.CANCELLED))
    else:
        raise ControlError(f"this run is already {run.get_status_display()}")


def _set(run: Run, status: str) -> None:
    Run.objects.filter(pk=run.pk).update(status=status)
    run.status = status
    broadcast(run, live.status_message(status))
