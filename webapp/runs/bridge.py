"""The engine's two interfaces, implemented on the database and Channels (DESIGN.md):

- ``RunEventSink``: every engine event becomes an Event row (plus Judgement, WorkflowVersion and
  Mutation rows where the event says so) and a message to the run's WebSocket group.
- ``DatabaseGate``: a proposed mutation becomes a Mutation row; the run's gate policy decides
  it, or the worker waits on the row until a person approves or vetoes it.

Both run in the Celery worker. Between steps they look at the run's row, so a person's pause or
cancel (or a lease taken over by a resumed attempt) stops the engine with ``RunInterrupted``.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
from typing import Any

from channels.layers import get_channel_layer
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from engine.errors import RunInterrupted
from engine.trace import Event as EngineEvent
from engine.workflow import Workflow

from .models import (Event, GatePolicy, Judgement, Mutation, MutationStatus, Run, RunStatus,
                     WorkflowVersion)

log = logging.getLogger(__name__)
CONTROL_CHECK_S = 0.25
BROADCAST_BACKOFF_S = 2.0


def brief(payload: dict, limit: int = 160) -> dict:
    """The part of a payload worth pushing to every browser: scalars, short strings, scores."""
    out: dict[str, Any] = {}
    for k, v in payload.items():
        if isinstance(v, (bool, int, float)) or v is None:
            out[k] = v
        elif isinstance(v, str):
            out[k] = v if len(v) <= limit else v[:limit] + "…"
        elif k in ("scores", "budget_left", "used", "budget_used") and isinstance(v, dict):
            out[k] = v
    return out


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

    def get(self) -> asyncio.AbstractEventLoop:
        with self.lock:
            if self.loop is None or self.pid != os.getpid():
                self.pid, self.loop = os.getpid(), asyncio.new_event_loop()
                threading.Thread(target=self.loop.run_forever, name="trellis-broadcast", daemon=True).start()
            return self.loop


_LOOP = _Loop()


def broadcast(run: Run | int, message: dict, timeout_s: float = 5.0) -> None:
    """Send to everyone watching a run. A missing channel layer never stops the engine."""
    group = run.group if isinstance(run, Run) else f"run-{run}"
    if time.monotonic() < _LOOP.quiet_until:
        return
    try:
        layer = get_channel_layer()
        future = asyncio.run_coroutine_threadsafe(
            # Encoded once here, not once per connected browser in the web server.
            layer.group_send(group, {"type": "run.message", "text": json.dumps(message, default=str)}), _LOOP.get())
        future.result(timeout_s)
    except Exception:  # noqa: BLE001 - live updates are best effort; the database has everything
        _LOOP.quiet_until = time.monotonic() + BROADCAST_BACKOFF_S
        log.warning("could not push to %s", group, exc_info=log.isEnabledFor(logging.DEBUG))


def record_version(run: Run, data: dict, author: str, note: str, iteration: int, adopted: bool = True) -> WorkflowVersion:
    with transaction.atomic():
        current = run.versions.order_by("-number").first()
        number = (current.number + 1) if current else 1
        version = WorkflowVersion.objects.create(
            run=run, number=number, hash=data.get("hash") or Workflow.from_dict(data).hash, parent=current,
            data=data, author=author, note=note, iteration=iteration, adopted=adopted)
    broadcast(run, {"kind": "version_created", "version": number, "author": author})
    return version


class RunEventSink:
    def __init__(self, run: Run, lease: str):
        self.run_id = run.pk
        self.lease = lease
        self.seq = run.last_seq
        self.usage = dict(run.usage or {})
        self._checked = 0.0
        # What a proposal left waiting by an earlier attempt is told when this one goes past it.
        self.moot_reason = moot_reason(run)

    # --- the engine's EventSink -----------------------------------------------------------
    def emit(self, event: EngineEvent) -> None:
        self.seq += 1
        payload = event.payload
        Event.objects.create(run_id=self.run_id, seq=self.seq, source=event.run_id, source_seq=event.seq,
                             ts=event.ts, kind=event.kind, agent=event.agent or "", iteration=event.iteration,
                             payload=payload)
        if event.kind == "model_call" and isinstance(payload.get("budget_used"), dict):
            self.usage = payload["budget_used"]  # the run's one budget, as of this call
        Run.objects.filter(pk=self.run_id).update(last_seq=self.seq, heartbeat=timezone.now(), usage=self.usage)
        self._side_effects(event)
        broadcast(self.run_id, {"kind": event.kind, "seq": self.seq, "agent": event.agent,
                                "iteration": event.iteration, "source": event.run_id, "ts": event.ts,
                                "payload": brief(payload)})
        self.check_control()

    def close(self) -> None:
        pass

    # --- control --------------------------------------------------------------------------
    def check_control(self, force: bool = False) -> None:
        """Raise RunInterrupted if a person paused or cancelled the run, or it changed hands."""
        now = time.monotonic()
        if not force and now - self._checked < CONTROL_CHECK_S:
            return
        self._checked = now
        status, lease = Run.objects.filter(pk=self.run_id).values_list("status", "lease").get()
        if lease != self.lease:
            raise RunInterrupted("lease lost: the run was resumed by another worker")
        if status == RunStatus.PAUSING:
            raise RunInterrupted("paused")
        if status == RunStatus.CANCELLING:
            raise RunInterrupted("cancelled")

    def heartbeat(self) -> None:
        Run.objects.filter(pk=self.run_id, lease=self.lease).update(heartbeat=timezone.now())

    def save_checkpoint(self, state: dict) -> None:
        """Called by the engine after every finished iteration: the step a resume starts after."""
        Run.objects.filter(pk=self.run_id, lease=self.lease).update(
            checkpoint=state, usage=state["budget"]["used"], heartbeat=timezone.now())
        broadcast(self.run_id, {"kind": "checkpoint", "n": state["n"], "used": state["budget"]["used"]})

    # --- rows derived from events ---------------------------------------------------------
    def _side_effects(self, event: EngineEvent) -> None:
        p = event.payload
        if event.kind == "search_started":
            run = Run.objects.get(pk=self.run_id)
            if not run.versions.exists() and p.get("workflow"):
                record_version(run, p["workflow"], "engine", f"initial workflow ({p.get('start', {}).get('path')})", 0)
        elif event.kind == "judgement":
            Judgement.objects.create(
                run_id=self.run_id, iteration=p.get("iteration_n", event.iteration), workflow_hash=p.get("workflow_hash", ""),
                ok=bool(p.get("ok")), J=p.get("J"), scores=p.get("scores", {}), feedback=p.get("feedback", {}),
                error=p.get("error", ""), checks=p.get("checks", []), validation=p.get("validation"),
                budget_used=dict(self.usage))
        elif event.kind == "search_iteration":
            self._iteration_settled(event)
        elif event.kind == "composition" and "gate" in p and isinstance(p.get("n"), int):
            close_moot(self.run_id, self.moot_reason, up_to_iteration=p["n"])  # the round's decision is made
        if event.kind == "composition" and p.get("approved") and p.get("workflow"):
            # A SciMARS round adopted its composer's choice.
            _record_if_new(Run.objects.get(pk=self.run_id), p, p.get("gate") or "composer",
                           f"round {p.get('n')}: {p.get('decision')}")

    def _iteration_settled(self, event: EngineEvent) -> None:
        p = event.payload
        if p.get("search") == "mimosa" and isinstance(p.get("n"), int):
            close_moot(self.run_id, self.moot_reason, up_to_iteration=p["n"])
        run = Run.objects.get(pk=self.run_id)
        Run.objects.filter(pk=self.run_id).update(budget_left=p.get("budget_left") or {})
        mutation = p.get("mutation") or {}
        if mutation.get("kind") == "human_edit":
            pending = run.versions.filter(adopted=False, hash=p.get("workflow_hash")).order_by("number").first()
            if pending:
                WorkflowVersion.objects.filter(pk=pending.pk).update(adopted=True, iteration=p.get("n", 0))
                broadcast(run, {"kind": "version_created", "version": pending.number, "author": pending.author})
            return
        if p.get("accepted") and p.get("workflow"):
            _record_if_new(run, p, p.get("decided_by") or "mutator",
                           f"{mutation.get('kind')} on {mutation.get('target')}: {mutation.get('rationale', '')}")


def _record_if_new(run: Run, payload: dict, author: str, note: str) -> None:
    """An adopted workflow becomes the next version, unless it already is the current one (a
    resumed attempt re-adopting what its lost predecessor had recorded)."""
    current = run.current_version
    if current is None or current.hash != payload["workflow_hash"]:
        record_version(run, payload["workflow"], author, note, payload.get("n", 0))


class DatabaseGate:
    """The human gate: policy first, then a person, through Mutation rows."""

    def __init__(self, run: Run, sink: RunEventSink, poll_s: float = 0.3):
        self.run_id = run.pk
        self.sink = sink
        self.poll_s = poll_s

    def decide(self, proposal: dict) -> tuple[bool, str, str]:
        run = Run.objects.get(pk=self.run_id)
        mutation = proposal["mutation"]
        checks = proposal.get("checks") or []
        evidence = {"J": proposal.get("J"), "incumbent_J": proposal.get("incumbent_J"), "checks": checks,
                    "validation": proposal.get("validation"),
                    "reference_validation": proposal.get("reference_validation"), "judgement": proposal.get("judgement"),
                    "probe_run_id": proposal.get("probe_run_id")}
        row, created = Mutation.objects.get_or_create(
            run=run, iteration=proposal.get("n", 0), child_hash=proposal["workflow"]["hash"],
            defaults=dict(kind=mutation["kind"], target=mutation.get("target", ""),
                          rationale=mutation.get("rationale", ""), proposal=mutation, diff=proposal.get("diff") or {},
                          parent_hash=proposal.get("parent_hash", ""), child=proposal["workflow"], evidence=evidence,
                          rule_accepts=bool(proposal.get("rule_accepts"))))
        if not created and row.status == MutationStatus.CLOSED:
            # Closed as moot, yet proposed again after all: it is live again and needs a decision.
            Mutation.objects.filter(pk=row.pk, status=MutationStatus.CLOSED).update(
                status=MutationStatus.PROPOSED, decided_by="", reason="", decided_at=None)
            row.refresh_from_db()
            created = row.status == MutationStatus.PROPOSED  # the gate policy applies as to a new one
        if not created and row.status != MutationStatus.PROPOSED:
            # Decided before the worker was lost: the person's decision stands.
            return row.accepted, row.decided_by, row.reason
        # This attempt waits on this proposal alone: one still waiting from an earlier attempt
        # was not proposed again, and deciding it would change nothing.
        close_moot(self.run_id, self.sink.moot_reason, keep=row.pk)
        if created:
            self._policy(run, row, checks)
        if row.pending:
            self._wait(row)
        row.refresh_from_db()
        return row.accepted, row.decided_by, row.reason

    def _policy(self, run: Run, row: Mutation, checks: list[dict]) -> None:
        all_pass = bool(checks) and all(c.get("passed") for c in checks)
        if run.gate_policy == GatePolicy.AUTOMATIC:
            status = MutationStatus.AUTO_APPROVED if row.rule_accepts else MutationStatus.AUTO_REJECTED
            decide(row, status, "policy:automatic", "J improved" if row.rule_accepts else "J did not improve")
        elif run.gate_policy == GatePolicy.AUTO_IMPROVE and row.rule_accepts and all_pass:
            decide(row, MutationStatus.AUTO_APPROVED, "policy:auto_improve", "J improved and every public check passed")
        else:
            broadcast(run, {"kind": "mutation_pending", "mutation": row.pk, "iteration": row.iteration})

    def _wait(self, row: Mutation) -> None:
        Run.objects.filter(pk=self.run_id, status=RunStatus.RUNNING).update(status=RunStatus.AWAITING)
        broadcast(self.run_id, {"kind": "status", "status": RunStatus.AWAITING})
        try:
            while True:
                if Mutation.objects.filter(pk=row.pk).exclude(status=MutationStatus.PROPOSED).exists():
                    return
                self.sink.check_control(force=True)
                self.sink.heartbeat()
                time.sleep(self.poll_s)
        finally:
            if Run.objects.filter(pk=self.run_id, status=RunStatus.AWAITING).update(status=RunStatus.RUNNING):
                broadcast(self.run_id, {"kind": "status", "status": RunStatus.RUNNING})

    def human_edit(self, incumbent: Workflow) -> tuple[Workflow, str] | None:
        version = WorkflowVersion.objects.filter(run_id=self.run_id, adopted=False).order_by("number").first()
        if version is None:
            return None
        # This iteration probes the person's edit and proposes nothing: a proposal still waiting
        # from an earlier attempt will not come back, so it is closed now, not when it settles.
        close_moot(self.run_id, self.sink.moot_reason)
        wf = Workflow.from_dict({**version.data, "hash": None})
        return wf, version.author


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
            broadcast(run_id, {"kind": "mutation_decided", "mutation": pk, "status": MutationStatus.CLOSED,
                               "by": "studio"})
    return closed


def decide(row: Mutation, status: str, by: str, reason: str) -> bool:
    """Settle a pending mutation; False when someone (or something) settled it first."""
    changed = Mutation.objects.filter(pk=row.pk, status=MutationStatus.PROPOSED).update(
        status=status, decided_by=by, reason=reason, decided_at=timezone.now())
    if changed:
        row.refresh_from_db()
        broadcast(row.run_id, {"kind": "mutation_decided", "mutation": row.pk, "status": status, "by": by})
    return bool(changed)
