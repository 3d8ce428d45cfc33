"""What a browser watching a run receives: each engine event's typed payload (engine/protocol/
events.py) as the page needs it, and the studio's own messages.

An engine event becomes ``{"kind", "seq", "agent", "iteration", "source", "ts", "data"}``:
``data`` is the payload without what no page shows live (prompts, responses, programs, outputs),
plus what the page would otherwise have to fetch: an agent's new state, a new probe's graph, a
score point. The page applies it as it comes (static/js/run.js), in ``seq`` order: one it missed
it fetches again (``missed_messages``), shaped the same way from the same rows, so a page that
catches up ends where one that saw everything did.

Studio messages (a status change, a decision, a new version) change what differs per viewer
(which buttons a role may press), so they name the ``fragments`` they change and the WebSocket
consumer renders those for its viewer (webapp/runs/fragments.py) before sending.
"""
from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any, Callable

from engine.judge_rubric import CRITERIA
from engine.protocol.events import AgentFinished, EvidenceRecorded, Judgement, ModelCall, Payload, RunStarted
from engine.replay import dag_state
from engine.trace import Event as EngineEvent

from .evidence import summary
from .models import Event as EventRow
from .models import Judgement as JudgementRow
from .models import Run
from .presenters import cytoscape_elements, incumbent_j, probe_label
from .search_state import carries_state, search_state

SHORT = 300          # characters of a string field that go live
SMALL = 2000         # serialized characters of a list or object field that go live
# Fields that hold prompts, answers, programs, outputs or whole workflows: read in the trace
# viewer, never pushed to every page.
HEAVY = frozenset({"code", "stdout", "stderr", "stdout_tail", "stderr_tail", "messages", "response", "raw", "report", "text", "answer",
                   "workflow", "outputs", "provider_message"})


def _small(payload: Payload) -> dict[str, Any]:
    """The payload's fields a page can show: scalars, short strings, small structures."""
    out: dict[str, Any] = {}
    for key, value in payload.to_payload().items():
        if key in HEAVY:
            continue
        if isinstance(value, str):
            out[key] = value if len(value) <= SHORT else value[:SHORT] + "…"
        elif isinstance(value, (list, dict)):
            if len(json.dumps(value, default=str)) <= SMALL:
                out[key] = value
        else:
            out[key] = value
    return out


def _agent_finished(run_id: int, seq: int, p: AgentFinished, event: EngineEvent) -> dict:
    return {"status": p.status, "state": dag_state(p.status)}


def _run_started(run_id: int, seq: int, p: RunStarted, event: EngineEvent) -> dict:
    """The probe's graph, labelled with the version current when it started: the same whether
    the message goes live or is fetched again later by a page catching up."""
    run = Run.objects.get(pk=run_id)
    version = (run.versions.filter(created__lte=datetime.fromtimestamp(event.ts, tz=timezone.utc))
               .order_by("-number").first()) or run.versions.order_by("number").first()
    return {"workflow_hash": p.workflow_hash, "attempt": p.attempt,
            "graph": {"elements": cytoscape_elements(p.workflow, {}), "states": {},
                      "source": event.run_id, **probe_label(run, p.workflow_hash, event.iteration, version)}}


def _judgement(run_id: int, seq: int, p: Judgement, event: EngineEvent) -> dict:
    """One point of the score charts (presenters.score_series has the whole series) as of this
    judgement, the same sent live or fetched later: ``index`` is its place in the series (the
    judgements before it; each judgement event stored one Judgement row), the best J and the
    budget are those of the rows up to its own."""
    index = EventRow.objects.filter(run_id=run_id, kind="judgement", seq__lt=seq).count()
    rows = list(JudgementRow.objects.filter(run_id=run_id).order_by("pk").values_list("budget_used", flat=True)
                [:index + 1])
    incumbent = incumbent_j(run_id, before_seq=seq)
    used = (rows[index] if len(rows) > index else None) or \
        Run.objects.filter(pk=run_id).values_list("usage", flat=True).first() or {}
    return {"ok": p.ok, "point": {
        "iteration": p.iteration_n, "J": p.J, "incumbent_J": incumbent[index] if len(incumbent) > index else None,
        "criteria": {c: (p.scores or {}).get(c) for c in CRITERIA},
        "checks_passed": sum(1 for c in p.checks if c.passed), "checks_total": len(p.checks),
        "validation": p.validation.value if p.validation and p.validation.ok else None,
        "tokens": used.get("tokens"), "calls": used.get("calls"), "index": index}}


def _model_call(run_id: int, seq: int, p: ModelCall, event: EngineEvent) -> dict:
    return {"role": p.role, "purpose": p.purpose[:SHORT], "model": p.model, "cached": p.cached,
            "tokens": p.prompt_tokens + p.completion_tokens,
            "used": p.budget_used.model_dump()}


def _evidence_recorded(run_id: int, seq: int, p: EvidenceRecorded, event: EngineEvent) -> dict:
    """A new node of the evidence panel: the record with a preview of its text (the whole text
    is fetched on click), the studio event its provenance names, and its links."""
    record = p.record.model_dump()
    prov = record["provenance"]
    origin = None
    if prov.get("run_id") and prov.get("event_seq"):
        origin = EventRow.objects.filter(run_id=run_id, source=prov["run_id"], source_seq=prov["event_seq"]).values_list(
            "seq", "kind").first()
    return {"record": summary(run_id, record, origin),
            "links": [{"source": p.record.id, "target": link.target, "type": link.type} for link in p.links]}


SHAPERS: dict[str, Callable[[int, int, Any, EngineEvent], dict]] = {
    "agent_started": lambda run_id, seq, p, event: {"state": dag_state("RUNNING")},
    "agent_finished": _agent_finished,
    "run_started": _run_started,
    "judgement": _judgement,
    "model_call": _model_call,
    "evidence_recorded": _evidence_recorded,
}


def event_message(run_id: int, seq: int, event: EngineEvent, state: bool = True) -> dict:
    """The browser's message for one stored engine event (of run ``run_id``, studio seq ``seq``).
    An event that changes its search's own state (``Search.state``: the tree) carries that state
    as the page draws it, a few dozen nodes and no rules to repeat in the browser; ``state=False``
    leaves it out (a page catching up draws only the newest)."""
    payload = event.data
    shaper = SHAPERS.get(event.kind)
    data = shaper(run_id, seq, payload, event) if shaper else _small(payload)
    if state and carries_state(payload):
        current = search_state(Run.objects.select_related("task").get(pk=run_id))
        if current is not None:
            data["state"] = current
    return {"kind": event.kind, "seq": seq, "agent": event.agent, "iteration": event.iteration,
            "source": event.run_id, "ts": event.ts, "data": data}


def stored_message(row, state: bool = True) -> dict:
    """The message a stored Event row was sent as (for a page's first view of recent events, and
    for a page catching up on the ones it missed). A row from before payloads were typed, which
    its model refuses, is listed without data."""
    if row.typed is None:
        return {"kind": row.kind, "seq": row.seq, "agent": row.agent or None, "iteration": row.iteration,
                "source": row.source, "ts": row.ts, "data": {}}
    return event_message(row.run_id, row.seq, row.as_event(), state=state)


CATCH_UP_LIMIT = 500  # messages in one answer to a page catching up; it asks again for more


def missed_messages(run: Run, after: int, limit: int = CATCH_UP_LIMIT,
                    until: int | None = None) -> tuple[list[dict], bool]:
    """The run's event messages after ``after`` (up to ``until``), oldest first, as they were sent
    live, and whether more follow. Only the last event that changes the search's state carries
    it: the page keeps the newest anyway."""
    rows = run.events.filter(seq__gt=after)
    if until is not None:
        rows = rows.filter(seq__lte=until)
    rows = list(rows.order_by("seq")[:limit + 1])
    more = len(rows) > limit
    rows = rows[:limit]
    last = max((i for i, r in enumerate(rows) if _stored_carries_state(r)), default=None)
    return [stored_message(r, state=(i == last)) for i, r in enumerate(rows)], more


def _stored_carries_state(row) -> bool:
    return (p := row.typed) is not None and carries_state(p)


def studio_message(kind: str, fragments: list[str] = (), **fields: Any) -> dict:
    """A studio message (status, checkpoint, version_created, mutation_pending/decided); the
    consumer renders ``fragments`` for each viewer."""
    return {"kind": kind, **fields, "fragments": list(fragments)}


def status_message(status: str, reason: str = "") -> dict:
    return studio_message("status", ["header"], status=status, reason=reason[:300])


def mutation_message(kind: str, mutation_id: int, **fields: Any) -> dict:
    return studio_message(kind, [f"mutation:{mutation_id}", "header"], mutation=mutation_id, **fields)


def version_message(number: int, author: str) -> dict:
    return studio_message("version_created", ["timeline", "diff", "editor", "header"], version=number, author=author)
