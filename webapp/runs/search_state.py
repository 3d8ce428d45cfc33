"""A run's search's own state (``Search.state``, engine/search/: the tree's nodes, each iteration's
parents, the champion), folded from the run's stored events for the page's card, the report and
every such event's live message.

The engine keeps its tree in the run folder, but the studio's record of a run is its Event rows:
they survive a resumed or moved run folder and are what the browser is pushed live, so the
card's first drawing and its live updates read the same thing (webapp/runs/live.py), and the
page only draws it (``static/js/tree.js``). No search is named here: a search has a state when
its class folds one.
"""
from __future__ import annotations

from engine.protocol.events import Payload
from engine.search import registry
from engine.trace import Event as EngineEvent

from .bundles import has_bundle
from .models import Run
from .presenters import EVENT_FIELDS

# Every payload model some search folds into its state: the events whose live message carries it.
STATE_PAYLOADS: tuple[type[Payload], ...] = tuple(dict.fromkeys(
    model for search in registry.REGISTRY.values() for model in search.state_payloads))


def carries_state(payload: Payload) -> bool:
    """Whether an event changes its search's state (its live message then carries the state)."""
    return isinstance(payload, STATE_PAYLOADS)


def search_state(run: Run) -> dict | None:
    """The state of ``run``'s search as JSON, with the task's metric and whether the champion
    bundle is written; None for a search that has none."""
    search = registry.search_class(run.search)
    if not search.state_payloads:
        return None
    kinds = sorted({model.kind for model in search.state_payloads})
    rows = run.events.filter(kind__in=kinds).order_by("seq").values_list(*EVENT_FIELDS)
    events = [EngineEvent(run_id=source, seq=seq, ts=ts, kind=kind, agent=agent or None, iteration=iteration,
                          payload=payload) for source, seq, ts, kind, agent, iteration, payload in rows]
    state = search.state(events, bool(run.task.higher_is_better))
    return {**state, "metric": run.task.metric_name, "bundle": has_bundle(run)}

