"""Annotations (issue 13): a team's labels, scores and comments on what a run did, with label
sets and annotation queues.

An annotation targets one thing a person can point at in a run: a trace event (by the studio's
event ``seq``), an artifact (its sha256), a mutation (its id), an evidence record (its id in the
run's graph) or a workflow version (its number). ``target_ref`` holds that key as text. The
tables keep the names they had in ``runs`` (``Meta.db_table``), where they were made (runs 0007).
"""
from __future__ import annotations

from django.conf import settings
from django.db import models

from webapp.teams.models import Project

TARGET_KINDS = (("event", "trace event"), ("artifact", "artifact"), ("mutation", "mutation"),
                ("evidence", "evidence record"), ("version", "workflow version"))


class ScoreKind(models.TextChoices):
    NONE = "none", "labels only"
    SCALE = "scale", "a score on a scale"
    PASS_FAIL = "pass_fail", "pass or fail"


class LabelSet(models.Model):
    """A project's vocabulary for annotating: labels (e.g. "wrong data path", "hallucinated
    value", "good repair") and how an item is scored."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="label_sets")
    name = models.CharField(max_length=120)
    labels = models.JSONField(default=list)          # ["wrong data path", ...]; keys 1..9 pick them in a queue
    score_kind = models.CharField(max_length=20, choices=ScoreKind.choices, default=ScoreKind.NONE)
    scale_min = models.IntegerField(default=1)
    scale_max = models.IntegerField(default=5)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "runs_labelset"
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="one_label_set_name_per_project")]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class AnnotationQueue(models.Model):
    """A reviewer's queue: the items of some runs that match a filter, worked through one at a
    time by annotators. ``filter``: {"runs": [ids], "agents": [...], "kinds": [...],
    "check_failed": bool, "iteration": int|null, "target_kind": "event"|...}."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="queues")
    name = models.CharField(max_length=120)
    label_set = models.ForeignKey(LabelSet, on_delete=models.PROTECT, related_name="queues")
    filter = models.JSONField(default=dict)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "runs_annotationqueue"
        ordering = ["-created"]


class QueueItem(models.Model):
    """One item of a queue, in order; annotations made through the queue point at it."""

    queue = models.ForeignKey(AnnotationQueue, on_delete=models.CASCADE, related_name="items")
    position = models.PositiveIntegerField()
    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="queue_items")
    target_kind = models.CharField(max_length=20, choices=TARGET_KINDS)
    target_ref = models.CharField(max_length=120)

    class Meta:
        db_table = "runs_queueitem"
        ordering = ["queue", "position"]
        constraints = [models.UniqueConstraint(fields=["queue", "position"], name="one_item_per_position")]


class Annotation(models.Model):
    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="annotations")
    target_kind = models.CharField(max_length=20, choices=TARGET_KINDS)
    target_ref = models.CharField(max_length=120)
    label_set = models.ForeignKey(LabelSet, null=True, blank=True, on_delete=models.SET_NULL, related_name="annotations")
    labels = models.JSONField(default=list)
    score = models.FloatField(null=True, blank=True)       # on the label set's scale
    passed = models.BooleanField(null=True, blank=True)    # pass/fail label sets
    comment = models.TextField(blank=True)
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.CASCADE, related_name="replies")
    queue_item = models.ForeignKey(QueueItem, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="annotations")
    skipped = models.BooleanField(default=False)            # an annotator skipped this queue item
    author = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL,
                               related_name="annotations")
    source = models.CharField(max_length=120, blank=True)   # "import:<file>" for imported labels
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "runs_annotation"
        ordering = ["created"]
        indexes = [models.Index(fields=["run", "target_kind", "target_ref"], name="annotation_target")]
