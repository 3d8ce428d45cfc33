"""A task a project's runs work on: the folder a scientist brought (Problem.md, data,
evaluate.py), registered once its loader and preflight accepted it. The table keeps the name it
had in ``runs`` (``Meta.db_table``)."""
from __future__ import annotations

from django.db import models

from webapp.teams.models import Project


class Task(models.Model):
    """A task folder (Problem.md, Requirements.md, Evaluation.md, data, evaluate.py)."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="tasks")
    name = models.CharField(max_length=120)
    title = models.CharField(max_length=300, blank=True)
    folder = models.CharField(max_length=500)
    metric_name = models.CharField(max_length=80, blank=True)
    higher_is_better = models.BooleanField(default=True)

    class Meta:
        db_table = "runs_task"
        unique_together = [("project", "name")]

    def __str__(self) -> str:
        return self.title or self.name
