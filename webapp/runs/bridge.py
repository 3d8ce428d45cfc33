"""The engine's three interfaces, implemented on the database and Channels (DESIGN.md):

- ``RunEventSink``: every engine event becomes an Event row (plus Judgement and WorkflowVersion
  rows where the event says so) and a message to the run's WebSocket group.
- ``DatabaseGate``: a proposal becomes a Mutation row; the run's gate policy decides it, or the
  run is suspended ("awaiting") until a person decides, with no worker held meanwhile.
- ``RunControl``: a person's pause or cancel (or a lease taken over by a resumed attempt),
  read by the engine at its step boundaries, stops it with ``RunInterrupted``.

All three run in the Celery worker.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
from typing import Callable, TypeVar

from channels.layers import get_channel_layer
from django.db import OperationalError, transaction
from django.utils import timezone

from engine.errors import AwaitingDecision, RunInterrupted
from engine.mutations import Mutation as EngineMutation, MutationError
from engine.protocol import events
from engine.protocol.gate import Decision, Proposal
from engine.search.base import HumanEdit
from engine.trace import Event as EngineEvent
from engine.workflow import Workflow

from . import live, studio_seq
from .models import (Event, GatePolicy, Judgement, Mutation, MutationStatus, Run, RunStatus,
                     WorkflowVersion)

log = logging.getLogger(__name__)
T = TypeVar("T")
CONTROL_CHECK_S = 1.0
BROADCAST_BACKOFF_S = 2.0


class _Loop:
    """One long-lived event loop per process for pushing to the channel layer.

    ``async_to_sync`` per event built a new loop and Redis connection every time: 6 ms a push,
    against 1.2 ms on a loop that stays (benchmarks/live_updates.py). Created lazily and per
    process id, because Celery's prefork children are forked after import."""

    def __init__(self) -> None:
        self.pid = 0
        self.loop: asyncio.AbstractEventLoop | None = None
        self.lock = threading.Lock()
        # After a failed push, later pushes are skipped for a moment instead of each waiting on
        # a Redis that is down or restarting (the engine's events are in the database anyway).
        self.quiet_until = 0.0
        self._unsent: dict[int, int] = {}  # run id -> studio messages that could not be sent

    def unsent(self, run_id: int, studio: bool) -> None:
        if studio:
            with self.lock:
                self._unsent[run_id] = self._unsent.get(run_id, 0) + 1

    def owed(self, run_id: int) -> int:
        with self.lock:
            return self._unsent.pop(run_id, 0)

    def get(self) -> asyncio.AbstractEventLoop:
        with self.lock:
            if self.loop is None or self.pid != os.getpid():
                self.pid, self.loop = os.getpid(), asyncio.new_event_loop()
                threading.Thread(target=self.loop.run_forever, name="trellis-broadcast", daemon=True).start()
            return self.loop


_LOOP = _Loop()


def broadcast(run: Run | int, message: dict, timeout_s: float = 5.0) -> None:
    """Send to everyone watching a run (webapp/runs/live.py says what), the fragments it names
    apart, for the web processes to render per role (webapp/runs/fanout.py). A message that is
    no engine event gets the run's next studio number (``sseq``, webapp/runs/studio_seq.py), so
    that a page notices one it missed. A missing channel layer never stops the engine."""
    run_id = run.pk if isinstance(run, Run) else int(run)
    fragments = list(message.pop("fragments", ()))
    studio = not isinstance(message.get("seq"), int)  # an engine event has its seq
    if time.monotonic() < _LOOP.quiet_until:
        _LOOP.unsent(run_id, studio)
        return
    try:
        future = asyncio.run_coroutine_threadsafe(_send(get_channel_layer(), run_id, message, fragments, studio),
                                                  _LOOP.get())
        future.result(timeout_s)
    except Exception:  # noqa: BLE001 - live updates are best effort; the database has everything
        _LOOP.quiet_until = time.monotonic() + BROADCAST_BACKOFF_S
        _LOOP.unsent(run_id, studio)
        log.warning("could not push to run-%s", run_id, exc_info=log.isEnabledFor(logging.DEBUG))


async def _send(layer, run_id: int, message: dict, fragments: list[str], studio: bool) -> None:
    if studio:
        # The number also counts this process's studio messages to the run that never left (Redis
        # was away): pages then see a gap and re-read. A lost engine event shows in its seq anyway.
        message = {**message, "sseq": await studio_seq.next_sseq(run_id, layer, 1 + _LOOP.owed(run_id))}
    # Encoded once here, not once per connected browser in the web server; an event's seq beside
    # it, for the web process to keep recent events by (a page's small gap is served from there).
    await layer.group_send(f"run-{run_id}", {"type": "run.message", "text": json.dumps(message, default=str),
                                             "fragments": fragments, "seq": None if studio else message["seq"]})


BUSY_WAITS_S = (0.5, 1, 2, 4, 8, 15, 30)  # after the database's own busy timeout, each time it is still locked


def while_busy(write: Callable[[], T]) -> T:
    """``write`` again while the database says it is locked (SQLite's writer lock held past its busy
    timeout by another process): a run's events wait for a busy database instead of failing the
    run ("failed: database is locked"). Any other error, or a lock that outlasts the waits, raises."""
    for wait in (*BUSY_WAITS_S, None):
        try:
            return write()
        except OperationalError as exc:
            if wait is None or "locked" not in str(exc):
                raise
            log.warning("the database is busy (%s); writing again in %g s", exc, wait)
            time.sleep(wait)
    raise AssertionError("unreachable")


def record_version(run: Run, data: dict, author: str, note: str, iteration: int, adopted: bool = True,
                   change: dict | None = None) -> WorkflowVersion:
    with transaction.atomic():
        current = run.versions.select_for_update().order_by("-number").first()
        number = (current.number + 1) if current else 1
        version = WorkflowVersion.objects.create(
            run=run, number=number, hash=data.get("hash") or Workflow.from_dict(data).hash, parent=current,
            data=data, author=author, note=note, iteration=iteration, adopted=adopted, change=change)
    broadcast(run, live.version_message(number, author))
    return version


class RunEventSink:
    def __init__(self, run: Run, lease: str):
        self.run_id = run.pk
        self.lease = lease
        self.seq = run.last_seq
        self.usage = dict(run.usage or {})
        # What a proposal left waiting by an earlier attempt is told when this one goes past it.
        self.moot_reason = moot_reason(run)

    # --- the engine's EventSink -----------------------------------------------------------
    def emit(self, event: EngineEvent) -> None:
        self.seq += 1
        payload = event.payload
        if event.kind == "model_call" and isinstance(payload.get("budget_used"), dict):
            self.usage = payload["budget_used"]  # the run's one budget, as of this call

        def write() -> None:
            with transaction.atomic():
                Event.objects.create(run_id=self.run_id, seq=self.seq, source=event.run_id, source_seq=event.seq,
                                     ts=event.ts, kind=event.kind, agent=event.agent or "",
                                     iteration=event.iteration, payload=payload)
                Run.objects.filter(pk=self.run_id).update(last_seq=self.seq, heartbeat=timezone.now(),
                                                          usage=self.usage)

        while_busy(write)
        self._side_effects(event)
        broadcast(self.run_id, live.event_message(self.run_id, self.seq, event))

    def close(self) -> None:
        pass

    def save_checkpoint(self, state: dict) -> None:
        """Called by the engine after every finished iteration: the step a resume starts after."""
        Run.objects.filter(pk=self.run_id, lease=self.lease).update(
            checkpoint=state, usage=state["budget"]["used"], heartbeat=timezone.now())
        broadcast(self.run_id, live.studio_message("checkpoint", n=state["n"], used=state["budget"]["used"]))

    def heartbeat(self) -> None:
        Run.objects.filter(pk=self.run_id, lease=self.lease).update(heartbeat=timezone.now())

    # --- rows derived from events ---------------------------------------------------------
    def _side_effects(self, event: EngineEvent) -> None:
        p = event.data
        if isinstance(getattr(p, "budget_left", None), events.BudgetLeft):  # a search's step says what is left
            Run.objects.filter(pk=self.run_id).update(budget_left=p.budget_left.model_dump())
        if isinstance(p, events.SearchStarted):
            run = Run.objects.get(pk=self.run_id)
            if not run.versions.exists():
                record_version(run, p.workflow, "engine", f"initial workflow ({p.start.path})", 0)
        elif isinstance(p, events.Judgement):
            Judgement.objects.create(
                run_id=self.run_id, iteration=p.iteration_n, workflow_hash=p.workflow_hash, ok=p.ok, J=p.J,
                scores=p.scores or {}, feedback=p.feedback or {}, error=p.error,
                checks=[c.model_dump(mode="json") for c in p.checks],
                validation=p.validation.model_dump(mode="json") if p.validation else None,
                budget_used=dict(self.usage))
        elif isinstance(p, events.SearchStep):  # a workflow search settled a step
            self._iteration_settled(p)
        elif isinstance(p, events.Composition) and p.gate is not None:
            close_moot(self.run_id, self.moot_reason, up_to_iteration=p.n)  # the round's decision is made
            if p.approved and p.workflow:  # a SciMARS round adopted its composer's choice
                _record_if_new(Run.objects.get(pk=self.run_id), p.workflow, p.workflow_hash, p.gate,
                               f"round {p.n}: {p.decision}", p.n)

    def _iteration_settled(self, p: events.SearchStep) -> None:
        """A workflow search settled a step: what waited before it is moot; an adopted change is
        the next version."""
        close_moot(self.run_id, self.moot_reason, up_to_iteration=p.n)
        mutation = p.mutation
        if mutation is None or mutation.kind == "human_edit":  # a person's edit is a version already
            return
        if p.accepted and p.workflow:
            _record_if_new(Run.objects.get(pk=self.run_id), p.workflow, p.workflow_hash, p.decided_by or "mutator",
                           f"{mutation.kind} on {mutation.target}: {mutation.rationale}", p.n or 0)


def _record_if_new(run: Run, workflow: dict, workflow_hash: str | None, author: str, note: str, n: int) -> None:
    """An adopted workflow becomes the next version, unless it already is the current one (a
    resumed attempt re-adopting what its lost predecessor had recorded)."""
    current = run.current_version
    if current is None or current.hash != workflow_hash:
        record_version(run, workflow, author, note, n)


class RunControl:
    """The engine's Control (engine/control.py) on the run's row: a person's pause or cancel,
    or a lease taken over by another attempt, stops the run at its next step boundary. Read at
    most once a second: a step is seconds long, and the database is shared with the pages."""

    def __init__(self, run: Run, lease: str, interval_s: float = CONTROL_CHECK_S):
        self.run_id = run.pk
        self.lease = lease
        self.interval_s = interval_s
        self._checked = 0.0

    def check(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._checked < self.interval_s:
            return
        self._checked = now
        status, lease = Run.objects.filter(pk=self.run_id).values_list("status", "lease").get()
        if lease != self.lease:
            raise RunInterrupted("lease lost: the run was resumed by another worker")
        if status == RunStatus.PAUSING:
            raise RunInterrupted("paused")
        if status == RunStatus.CANCELLING:
            raise RunInterrupted("cancelled")


class DatabaseGate:
    """The human gate on Mutation rows. The run's gate policy decides at once where it may;
    otherwise the proposal waits for a person *without* a worker: the run becomes "awaiting",
    the engine stops (AwaitingDecision, after checkpointing the proposal), and the decision
    sends the run back to the queue, where it resumes at this proposal and finds the answer."""

    def __init__(self, run: Run, lease: str, moot: str):
        self.run_id = run.pk
        self.lease = lease
        # What a proposal left waiting by an earlier attempt is told when this one goes past it.
        self.moot = moot

    def decide(self, proposal: Proposal) -> Decision:
        run = Run.objects.get(pk=self.run_id)
        row, created = Mutation.objects.get_or_create(
            run=run, iteration=proposal.n, child_hash=proposal.key,
            defaults=dict(kind=proposal.change.kind, target=proposal.change.target[:200],
                          rationale=proposal.change.rationale, proposal=proposal.model_dump(mode="json"),
                          diff=proposal.diff, parent_hash=proposal.parent[:64], child=proposal.workflow or {},
                          evidence=proposal.evidence.model_dump(mode="json"), rule_accepts=proposal.rule_accepts))
        if not created and row.status == MutationStatus.CLOSED:
            # Closed as moot, yet proposed again after all: it is live again and needs a decision.
            Mutation.objects.filter(pk=row.pk, status=MutationStatus.CLOSED).update(
                status=MutationStatus.PROPOSED, decided_by="", reason="", decided_at=None)
            row.refresh_from_db()
            created = row.status == MutationStatus.PROPOSED  # the gate policy applies as to a new one
        if not row.pending:  # decided, perhaps while the run was suspended: the decision stands
            return decision_of(row)
        # This attempt waits on this proposal alone: one still waiting from an earlier attempt
        # was not proposed again, and deciding it would change nothing.
        close_moot(self.run_id, self.moot, keep=row.pk)
        if created:
            self._policy(run, row, proposal)
        if not row.pending:
            return decision_of(row)
        return self._suspend(row)

    def _policy(self, run: Run, row: Mutation, proposal: Proposal) -> None:
        checks = proposal.evidence.checks
        # every search's evidence carries its public checks (the tree's: each node's plausibility on its
        # folds), so auto-improve sends a change that fails one to a person
        all_pass = all(c.passed for c in checks)
        if run.gate_policy == GatePolicy.AUTOMATIC:
            status = MutationStatus.AUTO_APPROVED if row.rule_accepts else MutationStatus.AUTO_REJECTED
            decide(row, status, "policy:automatic", proposal.rule)
        elif run.gate_policy == GatePolicy.AUTO_IMPROVE and row.rule_accepts and all_pass:
            decide(row, MutationStatus.AUTO_APPROVED, "policy:auto_improve", f"{proposal.rule}; every public check passed")
        else:
            broadcast(run, live.mutation_message("mutation_pending", row.pk, iteration=row.iteration))

    def _suspend(self, row: Mutation) -> Decision:
        """Mark the run awaiting; then look once more, because a person may have decided in the
        meantime, and whichever of the two moves the run out of "awaiting" first wins."""
        reason = f"waiting for a decision on iteration {row.iteration}"
        if not Run.objects.filter(pk=self.run_id, lease=self.lease, status=RunStatus.RUNNING).update(
                status=RunStatus.AWAITING, status_reason=reason):
            raise RunInterrupted("lease lost: the run was resumed by another worker")
        broadcast(self.run_id, live.status_message(RunStatus.AWAITING, reason))
        row.refresh_from_db()
        if not row.pending and Run.objects.filter(pk=self.run_id, lease=self.lease, status=RunStatus.AWAITING).update(
                status=RunStatus.RUNNING, status_reason=""):
            broadcast(self.run_id, live.status_message(RunStatus.RUNNING))
            return decision_of(row)
        raise AwaitingDecision(row.iteration, row.child_hash)

    def decision_made(self, proposal: Proposal) -> Decision | None:
        row = Mutation.objects.filter(run_id=self.run_id, iteration=proposal.n, child_hash=proposal.key).first()
        if row is None or row.pending or row.status == MutationStatus.CLOSED:
            return None
        return decision_of(row)

    def human_edit(self, incumbent: Workflow) -> HumanEdit | None:
        version = (WorkflowVersion.objects.filter(run_id=self.run_id, adopted=False, outcome="")
                   .select_related("parent").order_by("number").first())
        if version is None:
            return None
        # This iteration probes the person's edit and proposes nothing: a proposal still waiting
        # from an earlier attempt will not come back, so it is closed now, not when it settles.
        close_moot(self.run_id, self.moot)
        change = None
        if version.change:
            try:
                change = EngineMutation.from_dict(version.change)
            except MutationError:  # stored by an older studio, or damaged: adopted as written
                change = None
        return HumanEdit(Workflow.from_dict({**version.data, "hash": None}), version.author, ref=version.pk,
                         change=change, base=version.parent.hash if version.parent else None)

    def adopted(self, edit: HumanEdit, n: int) -> None:
        version = WorkflowVersion.objects.filter(pk=edit.ref, adopted=False).first()
        if version is None:
            return
        if edit.workflow.hash == version.hash:
            if WorkflowVersion.objects.filter(pk=version.pk, adopted=False).update(adopted=True, iteration=n):
                broadcast(self.run_id, live.version_message(version.number, version.author))
            return
        # Written on an older workflow and applied again on top of the current one: that is a
        # new version, and the person's own one says where their change went.
        run = Run.objects.get(pk=self.run_id)
        base = run.versions.filter(adopted=True).order_by("-number").first()
        again = record_version(run, edit.workflow.to_dict(), version.author,
                               f"{version.note} (v{version.number} applied again on top of "
                               f"v{base.number if base else '?'})", n, change=version.change)
        WorkflowVersion.objects.filter(pk=version.pk).update(
            adopted=True, iteration=n, outcome=f"applied again on top of v{base.number if base else '?'} "
                                               f"as v{again.number}, after what was adopted meanwhile")

    def refused(self, edit: HumanEdit, reason: str) -> None:
        if WorkflowVersion.objects.filter(pk=edit.ref, adopted=False, outcome="").update(outcome=f"refused: {reason}"):
            version = WorkflowVersion.objects.get(pk=edit.ref)
            broadcast(self.run_id, live.version_message(version.number, version.author))


def decision_of(row: Mutation) -> Decision:
    return Decision(approved=row.accepted, decided_by=row.decided_by or "studio", reason=row.reason,
                    promote=row.status == MutationStatus.PROMOTED)


def moot_reason(run: Run) -> str:
    """Why a proposal from an earlier attempt of ``run`` is closed by this attempt."""
    if run.checkpoint:
        return f"the run resumed from iteration {run.checkpoint.get('n', 0)}; this proposal was not re-proposed"
    if run.attempts:
        return "the run restarted its search; this proposal was not re-proposed"
    return "the run went past this iteration without it"


def close_moot(run_id: int, reason: str, up_to_iteration: int | None = None, keep: int | None = None) -> int:
    """Close the run's proposals still waiting for a person that the engine no longer waits on
    (status ``closed``, with ``reason``), so nobody decides something that changes nothing."""
    rows = Mutation.objects.filter(run_id=run_id, status=MutationStatus.PROPOSED)
    if up_to_iteration is not None:
        rows = rows.filter(iteration__lte=up_to_iteration)
    if keep is not None:
        rows = rows.exclude(pk=keep)
    closed = 0
    for pk in list(rows.values_list("pk", flat=True)):
        # Row by row on the still-proposed status: a person who decided first keeps the decision.
        if Mutation.objects.filter(pk=pk, status=MutationStatus.PROPOSED).update(
                status=MutationStatus.CLOSED, decided_by="studio", reason=reason, decided_at=timezone.now()):
            closed += 1
            broadcast(run_id, live.mutation_message("mutation_decided", pk, status=MutationStatus.CLOSED, by="studio"))
    return closed


def decide(row: Mutation, status: str, by: str, reason: str) -> bool:
    """Settle a pending mutation; False when someone (or something) settled it first."""
    changed = Mutation.objects.filter(pk=row.pk, status=MutationStatus.PROPOSED).update(
        status=status, decided_by=by, reason=reason, decided_at=timezone.now())
    if changed:
        row.refresh_from_db()
        broadcast(row.run_id, live.mutation_message("mutation_decided", row.pk, status=status, by=by))
    return bool(changed)
