"""How a synthesized start shows itself on any run's page, whatever search follows it: the
attachments each role was given from the library and why, the artifacts refused for not fitting
by type, and what grounding decided for an imported graph (from the ``synthesis_stage`` events)."""
from __future__ import annotations

from ..protocol.panels import Card, Group, Panel, TraceEvent, cards

STAGES = ("plan", "retrieve", "synthesize")


def present(events: list[TraceEvent]) -> list[Panel]:
    stages = {e.payload.get("stage"): e.payload for e in events
              if e.kind == "synthesis_stage" and e.payload.get("stage") in STAGES}
    if "synthesize" not in stages:
        return []
    groups: list[Group] = []
    plan = stages.get("plan") or {}
    grounding = (plan.get("outputs") or {}).get("grounding")
    if grounding:
        source = ((plan.get("inputs") or {}).get("imported") or {}).get("source", "imported")
        groups.append(Group(f"Imported {source} graph, grounded", [Card(
            (plan.get("inputs") or {}).get("file", "a workflow file"), "grounded", "plain", list(grounding)[:12])]))
    retrievals = (stages.get("retrieve") or {}).get("outputs", {}).get("retrievals") or {}
    chosen = stages["synthesize"].get("outputs", {}).get("attachments") or {}
    for role, retrieval in retrievals.items():
        picked = chosen.get(role) or []
        lines = [f"{c.get('kind')} {c.get('title') or c.get('name')} — {c.get('why', '')} ({c.get('source', '')})"
                 for c in picked]
        refused = retrieval.get("refused") or []
        if refused:
            lines.append(f"refused by type: {len(refused)} (e.g. {refused[0].get('ref', '').split('@')[0]}: "
                         f"{refused[0].get('why', '')})")
        groups.append(Group(role, [Card(f"{len(picked)} attachment(s)" if picked else "nothing attached",
                                        "synthesized", "good" if picked else "plain", lines)]))
    ranked = (stages.get("retrieve") or {}).get("note", "")
    return [cards("Synthesized from the library", groups, note=ranked)]
