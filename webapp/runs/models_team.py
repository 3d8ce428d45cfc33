"""What teams add to a run (issue 13): annotations with label sets, annotation queues, share
links and the audit log. Imported by models.py so Django finds them.

An annotation targets one thing a person can point at in a run: a trace event (by the studio's
event ``seq``), an artifact (its sha256), a mutation (its id), an evidence record (its id in the
run's graph) or a workflow version (its number). ``target_ref`` holds that key as text.
"""
from __future__ import annotations

import secrets

from django.conf import settings
from django.db import models
from django.utils import timezone

TARGET_KINDS = (("event", "trace event"), ("artifact", "artifact"), ("mutation", "mutation"),
                ("evidence", "evidence record"), ("version", "workflow version"))


class ScoreKind(models.TextChoices):
    NONE = "none", "labels only"
    SCALE = "scale", "a score on a scale"
    PASS_FAIL = "pass_fail", "pass or fail"


class LabelSet(models.Model):
    """A project's vocabulary for annotating: labels (e.g. "wrong data path", "hallucinated
    value", "good repair") and how an item is scored."""

    project = models.ForeignKey("runs.Project", on_delete=models.CASCADE, related_name="label_sets")
    name = models.CharField(max_length=120)
    labels = models.JSONField(default=list)          # ["wrong data path", ...]; keys 1..9 pick them in a queue
    score_kind = models.CharField(max_length=20, choices=ScoreKind.choices, default=ScoreKind.NONE)
    scale_min = models.IntegerField(default=1)
    scale_max = models.IntegerField(default=5)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="one_label_set_name_per_project")]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class AnnotationQueue(models.Model):
    """A reviewer's queue: the items of some runs that match a filter, worked through one at a
    time by annotators. ``filter``: {"runs": [ids], "agents": [...], "kinds": [...],
    "check_failed": bool, "iteration": int|null, "target_kind": "event"|...}."""

    project = models.ForeignKey("runs.Project", on_delete=models.CASCADE, related_name="queues")
    name = models.CharField(max_length=120)
    label_set = models.ForeignKey(LabelSet, on_delete=models.PROTECT, related_name="queues")
    filter = models.JSONField(default=dict)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created"]


class QueueItem(models.Model):
    """One item of a queue, in order; annotations made through the queue point at it."""

    queue = models.ForeignKey(AnnotationQueue, on_delete=models.CASCADE, related_name="items")
    position = models.PositiveIntegerField()
    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="queue_items")
    target_kind = models.CharField(max_length=20, choices=TARGET_KINDS)
    target_ref = models.CharField(max_length=120)

    class Meta:
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
        ordering = ["created"]
        indexes = [models.Index(fields=["run", "target_kind", "target_ref"], name="annotation_target")]


def new_share_token() -> str:
    return secrets.token_urlsafe(24)


class ShareLink(models.Model):
    """A read-only, expiring, revocable link to one run (live while it runs) or to its replay.
    The URL carries ``token`` signed by the project's secret (django.core.signing); the row is
    what makes it revocable and expiring."""

    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="share_links")
    token = models.CharField(max_length=64, unique=True, default=new_share_token)
    mode = models.CharField(max_length=10, choices=(("live", "live run"), ("replay", "replay")), default="live")
    expires = models.DateTimeField()
    revoked = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    created = models.DateTimeField(auto_now_add=True)
    note = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["-created"]

    @property
    def usable(self) -> bool:
        return self.revoked is None and self.expires > timezone.now()


class AuditEntry(models.Model):
    """One person's action in a project: who, when, what (never edited or deleted by the app)."""

    ACTIONS = (("decision", "decided a mutation"), ("edit", "edited a workflow"), ("annotation", "annotated"),
               ("note", "recorded evidence"), ("share_created", "created a share link"),
               ("share_revoked", "revoked a share link"), ("control", "controlled a run"),
               ("start", "started a run"), ("members", "changed members"), ("import", "imported annotations"),
               ("task", "added a task"), ("invite", "invited someone"), ("joined", "joined by invitation"), ("fork", "forked a run"),
               ("library", "edited the shared library"))

    project = models.ForeignKey("runs.Project", on_delete=models.CASCADE, related_name="audit")
    run = models.ForeignKey("runs.Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="audit")
    actor = models.CharField(max_length=150)        # user:<name>
    action = models.CharField(max_length=30, choices=ACTIONS)
    detail = models.JSONField(default=dict)
    created = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created"]


def audit(project, actor, action: str, run=None, **detail) -> AuditEntry:
    """Record one action; ``actor`` is a user or an already formatted name."""
    name = actor if isinstance(actor, str) else f"user:{actor.get_username()}"
    return AuditEntry.objects.create(project=project, run=run, actor=name, action=action, detail=detail)


class Invitation(models.Model):
    """An owner's invitation to join a project with a role: a link (mailed when an address is
    given), good once, until it expires or is revoked. Only the token's hash is stored."""

    project = models.ForeignKey("runs.Project", on_delete=models.CASCADE, related_name="invitations")
    email = models.EmailField(blank=True)
    role = models.PositiveSmallIntegerField()
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created = models.DateTimeField(auto_now_add=True)
    expires = models.DateTimeField()
    token_sha256 = models.CharField(max_length=64, unique=True)
    accepted_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                    related_name="+")
    accepted_at = models.DateTimeField(null=True, blank=True)
    revoked = models.BooleanField(default=False)

    class Meta:
        ordering = ["-created"]

    @property
    def state(self) -> str:
        if self.revoked:
            return "revoked"
        if self.accepted_at:
            return "accepted"
        if self.expires <= timezone.now():
            return "expired"
        return "open"
