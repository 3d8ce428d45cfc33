"""What the studio stores of a run: the run, its workflow versions, events, mutations,
judgements and share links (projects and members are in webapp/teams, tasks in webapp/tasks,
annotations in webapp/annotations). A run is persisted after every step (its events as they
happen, its checkpoint after every search iteration), so a killed worker loses at most the
step in flight."""
from __future__ import annotations

import secrets
from datetime import timedelta
from functools import cached_property

from django.conf import settings
from django.db import models
from django.utils import timezone

from engine.models import ModelSettings, redact_url
from engine.protocol.events import Payload, read_payload, read_payload_or_none
from engine.protocol.gate import Proposal
from engine.run_spec import RunSpec
from engine.search import registry
from engine.trace import Event as EngineEvent
from webapp.tasks.models import Task

# engine/sandbox/select.py's kinds, spelled out for the form and the run page
EXECUTOR_CHOICES = [("auto", "auto (Docker when it answers and its image is built)"),
                    ("docker", "Docker container"), ("subprocess", "subprocess sandbox")]


class GatePolicy(models.TextChoices):
    MANUAL = "manual", "Every mutation waits for a person"
    AUTO_IMPROVE = "auto_improve", "Auto-approve when J improves and all checks pass"
    AUTOMATIC = "automatic", "Fully automatic (the search's rule decides)"


class RunStatus(models.TextChoices):
    QUEUED = "queued", "queued"
    RUNNING = "running", "running"
    AWAITING = "awaiting_decision", "awaiting a decision"
    PAUSING = "pausing", "pausing"
    PAUSED = "paused", "paused"
    INTERRUPTED = "interrupted", "interrupted (resumable)"  # worker or task queue lost; status_reason says which
    CANCELLING = "cancelling", "cancelling"
    CANCELLED = "cancelled", "cancelled"
    COMPLETED = "completed", "completed"
    FAILED = "failed", "failed"


ACTIVE_STATUSES = {RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.AWAITING, RunStatus.PAUSING,
                   RunStatus.CANCELLING}
RESUMABLE_STATUSES = {RunStatus.PAUSED, RunStatus.INTERRUPTED, RunStatus.FAILED}


def default_search() -> str:
    return registry.DEFAULT


class Run(models.Model):
    # Not a field's choices: the engine's registry is the one list of searches, and a new search
    # needs no migration. Forms offer registry.choices(); the engine refuses an unknown name.
    SEARCHES = registry.choices()

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="runs")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    search = models.CharField(max_length=20, default=default_search)
    iterations = models.PositiveIntegerField(default=4)
    seed = models.IntegerField(default=0)
    gate_policy = models.CharField(max_length=20, choices=GatePolicy.choices, default=GatePolicy.MANUAL)
    model = models.CharField(max_length=200, blank=True, help_text="litellm model; blank = offline provider")
    # engine/models.py ModelSettings.to_dict(): the run's and each role's endpoint, answer length,
    # context, timeout, prices (a key's variable name, never a key). {} = the model name alone.
    model_settings = models.JSONField(default=dict, blank=True)
    max_tokens = models.PositiveIntegerField(default=2_000_000)
    single_agent = models.BooleanField(default=True, help_text="run the single-agent baseline after the search")
    # SciMARS + Memory: the probes share one evidence graph (selected branches visible to later
    # probes). Only SciMARS takes it; memory-fixed always shares whatever this says.
    memory = models.BooleanField(default=False, help_text="probes share one evidence graph (SciMARS + Memory)")
    # The sandbox of the run's programs (engine/sandbox/select.py); the run's search_started event
    # says which one auto chose, and why.
    executor = models.CharField(max_length=12, choices=EXECUTOR_CHOICES, default="auto",
                                help_text="sandbox of generated programs: auto, docker or subprocess")
    # Where the search starts (engine/synthesis/start.py): team, synthesized (from the library),
    # archive (its nearest workflow, else synthesized); blank: the search's own default.
    start = models.CharField(max_length=20, blank=True, default="",
                             help_text="starting workflow: team, synthesized, archive; blank: the search's default")
    # AgentCo-op review: a node spending more tokens than this in one run is repaired (None: not reviewed)
    node_token_cap = models.PositiveIntegerField(null=True, blank=True)
    status = models.CharField(max_length=20, choices=RunStatus.choices, default=RunStatus.QUEUED)
    status_reason = models.TextField(blank=True)
    # A worker owns a run while its lease matches; a resumed run gets a new lease, so a
    # stale worker that wakes up cannot write over its successor.
    lease = models.CharField(max_length=40, blank=True)
    heartbeat = models.DateTimeField(null=True, blank=True)
    checkpoint = models.JSONField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    usage = models.JSONField(default=dict)
    budget_left = models.JSONField(default=dict)
    result = models.JSONField(null=True, blank=True)   # initial/final official metrics, once committed
    run_dir = models.CharField(max_length=500, blank=True)
    # A fork (webapp/runs/forking.py): the run and the version of its workflow this one started from
    forked_from = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="forks")
    forked_version = models.PositiveIntegerField(null=True, blank=True)
    created = models.DateTimeField(auto_now_add=True)
    started = models.DateTimeField(null=True, blank=True)
    finished = models.DateTimeField(null=True, blank=True)
    last_seq = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["-created"]

    def __str__(self) -> str:
        return f"run {self.pk} · {self.task.name} · {self.search}"

    @property
    def group(self) -> str:
        return f"run-{self.pk}"

    def spec(self, models: ModelSettings | None = None) -> RunSpec:
        """What this run asks of the engine (engine/run_spec.py), from its row; ``models``: its
        settings as the operator's policy bounds them (webapp/runs/model_policy.py), else as saved."""
        return RunSpec(search=self.search, iterations=self.iterations, seed=self.seed, max_tokens=self.max_tokens,
                       model=self.model or None, models=models or ModelSettings.from_dict(self.model_settings),
                       start=self.start or None, single_agent=self.single_agent, memory=self.memory,
                       executor=self.executor, node_token_cap=self.node_token_cap)

    @property
    def model_label(self) -> str:
        """The model and where it is served, as the run's header shows it (no key: settings hold
        only the name of the variable that has it)."""
        settings = self.model_settings or {}
        run = settings.get("run") or {}
        label = self.model or "offline provider"
        if run.get("api_base"):
            label += f" at {redact_url(run['api_base'])}"
        roles = settings.get("roles") or {}
        if roles:
            label += " · " + ", ".join(f"{role}: {_role_label(options, self.model)}"
                                       for role, options in sorted(roles.items()))
        return label

    def get_search_display(self) -> str:
        try:
            return registry.search_class(self.search).title
        except ValueError:  # a search this version no longer has: its name, not a 500
            return self.search

    @property
    def search_unit(self) -> str:
        try:
            return registry.search_class(self.search).unit
        except ValueError:
            return "iteration"

    @property
    def shares_memory(self) -> bool:
        """Its probes read one shared evidence graph (asked for, or always, as the control does)."""
        return self.memory or self.search in registry.NEEDS_MEMORY

    @property
    def is_active(self) -> bool:
        return self.status in ACTIVE_STATUSES

    @property
    def worker_lost(self) -> bool:
        """Active, but its worker has gone quiet for longer than a heartbeat allows. (An
        awaiting run has no worker on purpose: it waits for a person, not for a process.)"""
        if self.status not in {RunStatus.RUNNING, RunStatus.PAUSING, RunStatus.CANCELLING}:
            return False
        stale = timedelta(seconds=settings.TRELLIS_HEARTBEAT_STALE_S)
        return self.heartbeat is None or timezone.now() - self.heartbeat > stale

    @property
    def can_resume(self) -> bool:
        return self.status in RESUMABLE_STATUSES or self.worker_lost

    @property
    def current_version(self) -> "WorkflowVersion | None":
        """The newest version, adopted or not (a person's edit waiting for the engine): what an
        edit is written on."""
        return self.versions.order_by("-number").first()

    @property
    def final_version(self) -> "WorkflowVersion | None":
        """The version a reader is shown as the run's workflow: the one the official score was
        computed on once there is one (the newest adopted version of that hash), else the newest
        adopted version. Never an edit that was not adopted."""
        adopted = self.versions.filter(adopted=True).order_by("-number")
        final_hash = ((self.result or {}).get("final") or {}).get("workflow_hash")
        if final_hash:
            # a trivial baseline handed in: the team's own committed workflow is the one shown
            searched = ((self.result or {}).get("final") or {}).get("searched") or {}
            for wanted in (final_hash, searched.get("workflow_hash")):
                if wanted and (found := adopted.filter(hash=wanted).first()) is not None:
                    return found
        return adopted.first()


def _role_label(options: dict, run_model: str) -> str:
    """One role's own settings as the header says them: its model and where it is served, and
    what else it sets ("own settings" told a reader nothing)."""
    text = options.get("model") or run_model or "offline provider"
    if options.get("api_base"):
        text += f" at {redact_url(options['api_base'])}"
    extra = [f"{name.replace('_', ' ')} {options[name]}" for name in
             ("max_answer_tokens", "context_tokens", "timeout_s", "structured") if options.get(name) is not None]
    return text + (f" ({', '.join(extra)})" if extra else "")


class WorkflowVersion(models.Model):
    """One version of a run's workflow lineage: the initial one, each accepted mutation, each
    person's edit. ``data`` is the engine's Workflow.to_dict()."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    hash = models.CharField(max_length=64)
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="children")
    data = models.JSONField()
    author = models.CharField(max_length=150)   # engine, mutator, user:<name>
    note = models.TextField(blank=True)
    iteration = models.IntegerField(default=0)
    adopted = models.BooleanField(default=True, help_text="False while a person's edit waits for the engine")
    # A person's edit: the change itself (engine Mutation.to_dict()), applied again on top of
    # whatever the search adopted between the edit and its turn (a proposal approved meanwhile).
    change = models.JSONField(null=True, blank=True)
    # What became of a person's edit when it was not adopted as written: "refused: why" (not
    # adopted), or where it was applied again (adopted as a later version).
    outcome = models.TextField(blank=True)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        unique_together = [("run", "number")]
        ordering = ["number"]

    def __str__(self) -> str:
        return f"v{self.number} {self.hash[:10]}"


class Event(models.Model):
    """One engine event. ``seq`` numbers a run's events in arrival order across all its probes;
    ``source`` is the engine's own run id (the search or one probe)."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="events")
    seq = models.PositiveIntegerField()
    source = models.CharField(max_length=120, blank=True)
    source_seq = models.PositiveIntegerField(default=0)
    ts = models.FloatField()
    kind = models.CharField(max_length=40, db_index=True)
    agent = models.CharField(max_length=120, blank=True, db_index=True)
    iteration = models.IntegerField(default=0, db_index=True)
    payload = models.JSONField(default=dict)

    @cached_property
    def data(self) -> Payload:
        """The payload typed (engine/protocol/events.py), as every reader reads it. Raises
        PayloadError for a stored payload its kind's model refuses."""
        return read_payload(self.kind, self.payload)

    @property
    def typed(self) -> Payload | None:
        """``data``, or None for a row its kind's model refuses (from before payloads were typed)."""
        if "data" not in self.__dict__ and (p := read_payload_or_none(self.kind, self.payload)) is not None:
            self.__dict__["data"] = p  # read once, as ``data`` keeps it
        return self.__dict__.get("data")

    def as_event(self) -> EngineEvent:
        """The row as the engine's event (its run id is the source, its number the studio's),
        for the engine's readers: the state fold (engine/replay.py), the console's lines."""
        return EngineEvent(run_id=self.source, seq=self.seq, ts=self.ts, kind=self.kind, agent=self.agent or None,
                           iteration=self.iteration, payload=self.payload, _data=self.__dict__.get("data"))

    class Meta:
        unique_together = [("run", "seq")]
        ordering = ["seq"]
        # the trace page's filters and option lists within one run, read from the index alone
        indexes = [models.Index(fields=["run", "kind", "seq"], name="event_run_kind"),
                   models.Index(fields=["run", "agent", "seq"], name="event_run_agent"),
                   models.Index(fields=["run", "iteration", "seq"], name="event_run_iteration")]


def typed(row: Event | None) -> Payload | None:
    """A row's typed payload (``Event.typed``); None for no row."""
    return row.typed if row is not None else None


class MutationStatus(models.TextChoices):
    PROPOSED = "proposed", "waiting for a person"
    APPROVED = "approved", "approved"
    PROMOTED = "promoted", "approved and promoted"
    VETOED = "vetoed", "vetoed"
    AUTO_APPROVED = "auto_approved", "auto-approved"
    AUTO_REJECTED = "auto_rejected", "rejected by the policy"
    ADOPTED = "adopted", "a person's edit, adopted"
    # Moot: the run went on without it (resumed from a checkpoint and proposed something else
    # at that iteration, or ended). ``reason`` says which; a late approve or veto changes nothing.
    CLOSED = "closed", "closed without a decision"


class Mutation(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="mutations")
    iteration = models.IntegerField()
    kind = models.CharField(max_length=40)
    target = models.CharField(max_length=200, blank=True)
    rationale = models.TextField(blank=True)
    proposal = models.JSONField(default=dict)        # the engine's gate Proposal (engine/protocol/gate.py)
    diff = models.JSONField(default=dict)
    parent_hash = models.CharField(max_length=64, blank=True)
    child_hash = models.CharField(max_length=64)
    child = models.JSONField(default=dict)           # the candidate workflow
    evidence = models.JSONField(default=dict)        # probe: checks, validation, judgement, J vs incumbent
    rule_accepts = models.BooleanField(default=False)
    status = models.CharField(max_length=20, choices=MutationStatus.choices, default=MutationStatus.PROPOSED)
    decided_by = models.CharField(max_length=150, blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    reason = models.TextField(blank=True)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-iteration", "-created"]
        unique_together = [("run", "iteration", "child_hash")]

    @property
    def pending(self) -> bool:
        return self.status == MutationStatus.PROPOSED

    @property
    def accepted(self) -> bool:
        return self.status in {MutationStatus.APPROVED, MutationStatus.PROMOTED, MutationStatus.AUTO_APPROVED,
                               MutationStatus.ADOPTED}

    @property
    def gate(self) -> Proposal:
        """The engine's typed proposal (engine/protocol/gate.py) this row holds."""
        return Proposal.model_validate(self.proposal)


class Judgement(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="judgements")
    iteration = models.IntegerField()
    workflow_hash = models.CharField(max_length=64)
    ok = models.BooleanField()
    J = models.FloatField(null=True)  # noqa: N815 - the papers' name
    scores = models.JSONField(default=dict)
    feedback = models.JSONField(default=dict)
    error = models.TextField(blank=True)
    checks = models.JSONField(default=list)
    validation = models.JSONField(null=True)
    budget_used = models.JSONField(default=dict)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["iteration", "created"]


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
