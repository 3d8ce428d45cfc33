"""The AgenticSciML tree of a run, rebuilt from its stored events for the run page's tree card.

The engine keeps its tree in the run folder, but the studio's record of a run is its Event rows:
they survive a resumed or moved run folder and are what the browser is pushed live, so the
card's first drawing and its live updates read the same thing: every tree event's message
carries this state (webapp/runs/live.py), and ``static/js/tree.js`` only draws it.
"""
from __future__ import annotations

from typing import Iterable

from engine.protocol.events import (NodeRetired, PayloadError, TreeChildAbandoned, TreeFinished, TreeIterationStarted,
                                    TreeNode, TreeVote, read_payload)

from .bundles import has_bundle
from .models import Event, Run

TREE_KINDS = ("tree_node", "node_retired", "search_iteration")

# The fields of a tree_node payload the card shows (the report is long and lives in the trace).
NODE_FIELDS = ("parent", "iteration", "strategy", "params", "score", "status", "knowledge", "debug_attempts",
               "verdict", "debate_turns", "vetoed", "promoted", "decided_by")


def _better(a: float, b: float, higher_is_better: bool) -> bool:
    return a > b if higher_is_better else a < b


def champion(nodes: Iterable[dict], higher_is_better: bool) -> str | None:
    """The best scored node a person did not veto; a tie goes to the older node, as in the engine."""
    best: dict | None = None
    for node in nodes:  # arrival order, so the first of equals is the older
        if node["status"] != "scored" or node["vetoed"] or node["score"] is None:
            continue
        if best is None or _better(node["score"], best["score"], higher_is_better):
            best = node
    return best["id"] if best else None


def _parent_reason(node_id: str, started: dict, votes: list[TreeVote], nodes: dict[str, dict]) -> dict:
    """Why ``node_id`` was expanded in an iteration: the engine takes the best node first, then
    every node a person promoted, then one vote winner per extra slot."""
    if node_id == started.get("best"):
        return {"id": node_id, "reason": "best", "label": "best node"}
    for vote in votes:
        if vote.winner != node_id:
            continue
        if vote.fallback:
            return {"id": node_id, "reason": "fallback", "label": "no valid vote: best remaining",
                    "slot": vote.slot}
        cast = list(vote.votes)
        got = vote.tally.get(node_id, 0)
        return {"id": node_id, "reason": "vote", "label": f"vote {got}/{len(cast)}", "slot": vote.slot,
                "votes": cast, "tally": dict(vote.tally)}
    node = nodes.get(node_id, {})
    who = node.get("decided_by") or "a person"
    return {"id": node_id, "reason": "promoted", "label": f"promoted by {who}"}


def tree_state(run: Run) -> dict:
    """Nodes, per-iteration parent choices and the champion of ``run``'s tree search, as JSON.
    ``pending_votes`` are votes of an iteration not started yet; ``seq`` is the last event read,
    so that the browser skips pushed events this state already holds."""
    higher = bool(run.task.higher_is_better)
    nodes: dict[str, dict] = {}
    iterations: dict[int, dict] = {}
    pending_votes: list[TreeVote] = []   # votes come before the "started" event of their iteration
    finished: dict | None = None
    max_children: int | None = None
    last_seq = 0
    events = Event.objects.filter(run=run, kind__in=TREE_KINDS).order_by("seq").values_list(
        "seq", "kind", "iteration", "payload")
    for seq, kind, iteration, payload in events:
        last_seq = seq
        try:
            p = read_payload(kind, payload)
        except PayloadError:  # from before payloads were typed, refused by its kind's model: left out
            continue
        if isinstance(p, TreeNode):
            old = nodes.get(p.node, {})
            # A resumed run may record a node again; the latest record wins, its position stays.
            nodes[p.node] = {"id": p.node, **{k: getattr(p, k) for k in NODE_FIELDS},
                             "vetoed": bool(p.vetoed), "promoted": bool(p.promoted),
                             "decided_by": p.decided_by or "", "params": p.params or {},
                             "retired": old.get("retired", False), "retired_at": old.get("retired_at"),
                             "seq": seq}
        elif isinstance(p, NodeRetired):
            node = nodes.get(p.node)
            max_children = p.max_children
            if node is not None:
                node["retired"], node["retired_at"] = True, p.iteration if p.iteration is not None else iteration
        elif isinstance(p, TreeVote):
            pending_votes.append(p)
        elif isinstance(p, TreeIterationStarted):
            iterations[iteration] = {"n": iteration, "best": p.best, "raw_parents": p.parents,
                                     "votes": pending_votes, "nodes_before": p.nodes, "abandoned": []}
            pending_votes = []
        elif isinstance(p, TreeChildAbandoned) and iteration in iterations:
            iterations[iteration]["abandoned"].append({"parent": p.parent, "error": p.error or ""})
        elif isinstance(p, TreeFinished):
            finished = {k: getattr(p, k) for k in ("stopped", "iterations", "champion", "champion_score", "reason")}

    for node in nodes.values():
        node["children"] = sum(1 for c in nodes.values() if c["parent"] == node["id"])
    rows = []
    for n in sorted(iterations):
        it = iterations[n]
        rows.append({"n": n, "nodes_before": it["nodes_before"], "abandoned": it["abandoned"],
                     "parents": [_parent_reason(pid, it, it["votes"], nodes) for pid in it["raw_parents"]],
                     "children": [c["id"] for c in nodes.values() if c["iteration"] == n]})
    return {"metric": run.task.metric_name, "higher_is_better": higher, "max_children": max_children,
            # once finished, the node the search committed to (engine/search/tree.commitment_order:
            # a best node whose gain over the root is noise gives way to it); until then the best so far
            "nodes": list(nodes.values()), "iterations": rows,
            "champion": (finished or {}).get("champion") or champion(nodes.values(), higher),
            "finished": finished,
            # each vote as it was stored (the fields it was written with)
            "pending_votes": [v.model_dump(mode="json", exclude_unset=True) for v in pending_votes], "seq": last_seq,
            "bundle": has_bundle(run)}  # the champion bundle is written (after the official evaluation)
