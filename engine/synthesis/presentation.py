"""How a synthesized start shows itself on any run's page, whatever search follows it: the
attachments each role was given from the library and why, the artifacts refused for not fitting
by type, and what grounding decided for an imported graph (from the ``synthesis_stage`` events)."""
from __future__ import annotations

from ..protocol.events import SynthesisStage
from ..protocol.panels import Card, Group, Panel, TraceEvent, cards
from ..trace import typed_events

STAGES = ("plan", "retrieve", "synthesize")


def present(events: list[TraceEvent]) -> list[Panel]:
    stages: dict[str, SynthesisStage] = {}
    for _, p in typed_events(events, "synthesis_stage"):
        if p.stage in STAGES:
            stages[p.stage] = p
    if "synthesize" not in stages:
        return []
    groups: list[Group] = []
    plan, retrieve = stages.get("plan"), stages.get("retrieve")
    grounding = plan.outputs.get("grounding") if plan else None
    if grounding:
        source = (plan.inputs.get("imported") or {}).get("source", "imported")
        groups.append(Group(f"Imported {source} graph, grounded", [Card(
            plan.inputs.get("file", "a workflow file"), "grounded", "plain", list(grounding)[:12])]))
    retrievals = (retrieve.outputs.get("retrievals") if retrieve else None) or {}
    chosen = stages["synthesize"].outputs.get("attachments") or {}
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
    ranked = retrieve.note if retrieve else ""
    return [cards("Synthesized from the library", groups, note=ranked)]
