"""Projects and the people in them: each member's role, the invitations to join, and the audit
log of who did what. Runs, tasks and annotations belong to a project; these tables keep the
names they had in ``runs`` (``Meta.db_table``), where they were made (runs 0001-0019)."""
from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class Project(models.Model):
    name = models.CharField(max_length=120, unique=True)
    description = models.TextField(blank=True)
    created = models.DateTimeField(auto_now_add=True)
    # The operator's (staff, through the admin) additions to TRELLIS_MODEL_ENDPOINTS and
    # TRELLIS_MODEL_KEY_VARIABLES for this project: one per line. No view of the studio writes them.
    model_endpoints = models.TextField(blank=True, help_text="API bases this project's runs may use, one per line "
                                                             "(a URL; its sub-paths are allowed too)")
    model_key_variables = models.TextField(blank=True, help_text="environment variables holding API keys that this "
                                                                 "project's runs may name, one per line")

    class Meta:
        db_table = "runs_project"

    def __str__(self) -> str:
        return self.name


class Role(models.IntegerChoices):
    """A member's role in a project; each role can do everything the roles below it can."""

    VIEWER = 10, "viewer"            # reads the project's runs, traces, artifacts
    ANNOTATOR = 20, "annotator"      # a viewer who may annotate, work annotation queues and record notes
    REVIEWER = 30, "reviewer"        # decides mutations, edits workflows, controls and starts runs
    OWNER = 40, "owner"              # a reviewer who manages the project's members


class Membership(models.Model):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.PositiveSmallIntegerField(choices=Role.choices, default=Role.VIEWER)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "runs_membership"
        constraints = [models.UniqueConstraint(fields=["project", "user"], name="one_membership_per_user")]
        ordering = ["-role", "user__username"]

    def __str__(self) -> str:
        return f"{self.user} · {self.project} · {self.get_role_display()}"


class AuditEntry(models.Model):
    """One person's action in a project: who, when, what (never edited or deleted by the app)."""

    ACTIONS = (("decision", "decided a mutation"), ("edit", "edited a workflow"), ("annotation", "annotated"),
               ("note", "recorded evidence"), ("share_created", "created a share link"),
               ("share_revoked", "revoked a share link"), ("control", "controlled a run"),
               ("start", "started a run"), ("members", "changed members"), ("import", "imported annotations"),
               ("task", "added a task"), ("invite", "invited someone"), ("joined", "joined by invitation"), ("fork", "forked a run"),
               ("library", "edited the shared library"), ("evaluator_approved", "approved a drafted evaluate.py"))

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="audit")
    run = models.ForeignKey("runs.Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="audit")
    actor = models.CharField(max_length=150)        # user:<name>
    action = models.CharField(max_length=30, choices=ACTIONS)
    detail = models.JSONField(default=dict)
    created = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        db_table = "runs_auditentry"
        ordering = ["-created"]


def audit(project, actor, action: str, run=None, **detail) -> AuditEntry:
    """Record one action; ``actor`` is a user or an already formatted name."""
    name = actor if isinstance(actor, str) else f"user:{actor.get_username()}"
    return AuditEntry.objects.create(project=project, run=run, actor=name, action=action, detail=detail)


class Invitation(models.Model):
    """An owner's invitation to join a project with a role: a link (mailed when an address is
    given), good once, until it expires or is revoked. Only the token's hash is stored."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="invitations")
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
        db_table = "runs_invitation"
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
