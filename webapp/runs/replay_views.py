"""Replay (time travel) of a run: its Event rows in seq order, each as the live message it was
(webapp/runs/live.py), plus the studio rows that are not events (mutations and their decisions,
workflow versions) with the time they happened. The replay page (static/js/replay.js) rebuilds
the DAG, the scores, the queue, the versions and the evidence at any slider position from this
one list; ``state_at`` is the same rebuild on the server, the reference the tests hold it to.

Messages are shaped from the stored payload alone: what live.py adds from *today's* database
(the incumbent J, the current version's label, the whole tree) would show the end of the run at
every position, so replay leaves it out and the page derives it from the events before."""
from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render

from engine.search import registry

from . import live, presenters, visibility
from .models import Run
from .search_state import carries_state

# Fields live.py computes from the database as it is now, not as it was at the event.
# (A judgement's incumbent_J is the incumbent's as it was when it was judged: it stays.)
NOW_FIELDS = {"judgement": ("tokens", "calls"), "run_started": ("label", "version", "version_hash")}


def _ts(dt) -> float | None:
    return dt.timestamp() if dt else None


def replay_message(row) -> dict:
    """One stored event as a replay message: live.stored_message without what it reads from now."""
    if (p := row.typed) is not None and carries_state(p):
        # live.py attaches the search's state as it is *now* to these (a query per event): replay
        # keeps the event's own fields, from which the state at any moment follows
        data = live._small(row.data)
        return {"kind": row.kind, "seq": row.seq, "agent": row.agent or None, "iteration": row.iteration,
                "source": row.source, "ts": row.ts, "data": data}
    msg = live.stored_message(row)
    data = dict(msg.get("data") or {})
    if row.kind == "judgement" and "point" in data:
        data["point"] = {k: v for k, v in data["point"].items() if k not in NOW_FIELDS["judgement"]}
    if row.kind == "run_started" and "graph" in data:
        data["graph"] = {k: v for k, v in data["graph"].items() if k not in NOW_FIELDS["run_started"]}
    if row.kind == "model_call":
        p = row.typed
        data["cost_usd"] = p.budget_used.cost_usd if p is not None else None
    return {**msg, "seq": row.seq, "ts": row.ts, "data": data}


def replay_data(run: Run) -> dict:
    """Everything the replay page needs, in one JSON document."""
    events = [replay_message(row) for row in run.events.order_by("seq")]
    versions = [{"number": v.number, "hash": v.hash, "author": v.author, "note": v.note[:300],
                 "iteration": v.iteration, "ts": _ts(v.created)} for v in run.versions.order_by("number")]
    mutations = [{"id": m.pk, "iteration": m.iteration, "kind": m.kind, "target": m.target,
                  "rationale": m.rationale[:300], "status": m.status, "status_label": m.get_status_display(),
                  "decided_by": m.decided_by, "reason": m.reason[:300], "ts": _ts(m.created),
                  "decided_ts": _ts(m.decided_at), "J": (m.evidence or {}).get("J"),
                  "incumbent_J": (m.evidence or {}).get("incumbent_J")}
                 for m in run.mutations.order_by("created")]
    return {"run": run.pk, "status": run.status, "metric": run.task.metric_name,
            "higher_is_better": run.task.higher_is_better, "search": run.search,
            "evolves": registry.search_class(run.search).evolves,
            "started": events[0]["ts"] if events else None, "ended": events[-1]["ts"] if events else None,
            "events": events, "versions": versions, "mutations": mutations}


def state_at(run: Run, seq: int) -> dict:
    """The DAG panel as the run page showed it right after event ``seq``: the workflow of the
    latest probe started by then, with the states its agents had reached, folded from its events
    as the page's own load folds them (presenters.probe_record, engine/replay.py)."""
    started = run.events.filter(kind="run_started", seq__lte=seq).order_by("-seq").only("source").first()
    record = presenters.probe_record(run, started.source, until=seq) if started else None
    if record is None or record.workflow_data is None:
        version = run.versions.order_by("number").first()
        workflow, states, source = (version.data if version else {}), {}, None
    else:
        workflow, states, source = record.workflow_data, record.dag_states(), started.source
    for agent in workflow.get("agents", []):
        states.setdefault(agent["id"], "waiting")
    return {"seq": seq, "source": source, "states": states, "elements": presenters.cytoscape_elements(workflow, states),
            "judged": run.events.filter(kind="judgement", seq__lte=seq).count()}


def replay_page(request: HttpRequest, run_id: int) -> HttpResponse:
    run, role = visibility.run_for(request.user, run_id)
    return render(request, "runs/replay.html", {"run": run, "role": role})


def replay_json(request: HttpRequest, run_id: int) -> JsonResponse:
    run, _ = visibility.run_for(request.user, run_id)
    return JsonResponse(replay_data(run))


def replay_state(request: HttpRequest, run_id: int) -> JsonResponse:
    """The DAG at one position (?seq=N), rebuilt on the server."""
    run, _ = visibility.run_for(request.user, run_id)
    try:
        seq = int(request.GET.get("seq", run.last_seq))
    except ValueError:
        return JsonResponse({"error": "seq must be an integer event number"}, status=400)
    return JsonResponse(state_at(run, seq))
