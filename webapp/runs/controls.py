"""Starting, pausing, resuming and cancelling runs: the one place that changes a run's status
from outside the worker (views, the studio command and tests all come through here)."""
from __future__ import annotations

import uuid
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from engine.task import load_task

from .bridge import broadcast
from .models import Project, Run, RunStatus, Task


class ControlError(Exception):
    """The action does not apply to the run in its current state."""


def task_for_folder(project: Project, folder: str | Path) -> Task:
    """Register a task folder in a project (validated by the engine's task loader)."""
    spec = load_task(folder)
    task, _ = Task.objects.update_or_create(project=project, name=spec.name, defaults=dict(
        title=spec.title, folder=str(Path(folder).resolve()), metric_name=spec.metric.name,
        higher_is_better=spec.metric.higher_is_better))
    return task


def _enqueue(run: Run) -> None:
    from .tasks import execute_run

    lease = uuid.uuid4().hex
    Run.objects.filter(pk=run.pk).update(lease=lease, status=RunStatus.QUEUED, heartbeat=None)
    run.lease, run.status = lease, RunStatus.QUEUED
    transaction.on_commit(lambda: execute_run.apply_async((run.pk, lease), queue="runs"))
    broadcast(run, {"kind": "status", "status": RunStatus.QUEUED})


def start_run(task: Task, user=None, **options) -> Run:
    run = Run.objects.create(task=task, created_by=user, **options)
    run.run_dir = str(Path(settings.TRELLIS_RUNS_DIR) / f"studio-{run.pk:05d}-{task.name}-{run.search}")
    run.save(update_fields=["run_dir"])
    _enqueue(run)
    return run


def recover_orphans() -> list[int]:
    """When the studio starts its own (only) worker, no run can still be executing: send the
    ones that were in flight back to the queue from their checkpoints and settle the ones a
    person had asked to pause or cancel. Returns the ids sent back."""
    sent = []
    for run in Run.objects.filter(status__in=[RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.AWAITING]):
        _enqueue(run)
        sent.append(run.pk)
    Run.objects.filter(status=RunStatus.PAUSING).update(status=RunStatus.PAUSED, status_reason="paused")
    Run.objects.filter(status=RunStatus.CANCELLING).update(status=RunStatus.CANCELLED, finished=timezone.now())
    return sent


def pause_run(run: Run) -> None:
    if run.status not in {RunStatus.RUNNING, RunStatus.AWAITING}:
        raise ControlError(f"only a running run can be paused; this one is {run.get_status_display()}")
    _set(run, RunStatus.PAUSING)


def resume_run(run: Run) -> None:
    if not run.can_resume:
        raise ControlError(f"this run is {run.get_status_display()}; only a paused, failed or interrupted run resumes")
    _enqueue(run)


def cancel_run(run: Run) -> None:
    if run.status in {RunStatus.RUNNING, RunStatus.AWAITING, RunStatus.PAUSING} and not run.worker_lost:
        _set(run, RunStatus.CANCELLING)
    elif run.status in {RunStatus.QUEUED, RunStatus.PAUSED, RunStatus.INTERRUPTED, RunStatus.FAILED} or run.worker_lost:
        Run.objects.filter(pk=run.pk).update(status=RunStatus.CANCELLED, finished=timezone.now(), lease="")
        broadcast(run, {"kind": "status", "status": RunStatus.CANCELLED})
    else:
        raise ControlError(f"this run is already {run.get_status_display()}")


def _set(run: Run, status: str) -> None:
    Run.objects.filter(pk=run.pk).update(status=status)
    run.status = status
    broadcast(run, {"kind": "status", "status": status})
