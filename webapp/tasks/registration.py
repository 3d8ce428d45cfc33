"""A task folder becomes a project's task: the engine's task loader reads it and preflight
checks its data (webapp/tasks/upload.py brings an uploaded or named folder this far)."""
from __future__ import annotations

from pathlib import Path

from django.conf import settings

from engine.preflight import preflight
from engine.task import Task as TaskSpec
from engine.task import load_task
from webapp.teams.models import Project

from .models import Task


def checked_task(folder: str | Path) -> TaskSpec:
    """A task folder validated by the engine's task loader and its data checked by preflight (a
    PreflightError lists every problem). Preflight runs the task's own evaluate.py (up to 30 s):
    never call this inside a transaction, where it would hold the database's write lock."""
    spec = load_task(folder)
    preflight(spec, cache_dir=Path(settings.TRELLIS_RUNS_DIR) / "preflight-cache")
    return spec


def register_task(project: Project, spec: TaskSpec) -> Task:
    """The checked task's row in ``project`` (quick: fit for a transaction)."""
    task, _ = Task.objects.update_or_create(project=project, name=spec.name, defaults=dict(
        title=spec.title, folder=str(Path(spec.folder).resolve()), metric_name=spec.metric.name,
        higher_is_better=spec.metric.higher_is_better))
    return task


def task_for_folder(project: Project, folder: str | Path) -> Task:
    """Check a task folder, then register it (outside any transaction: see checked_task)."""
    return register_task(project, checked_task(folder))
