import json

from django import template

register = template.Library()


@register.filter
def kind_label(value: str) -> str:
    """``procedure_refinement`` -> ``procedure refinement``."""
    return str(value).replace("_", " ")


@register.filter
def clock(ts: float) -> str:
    """An event's unix time as UTC wall-clock time to a tenth of a second."""
    from datetime import datetime, timezone

    return datetime.fromtimestamp(float(ts), tz=timezone.utc).strftime("%H:%M:%S.%f")[:10]


@register.filter
def event_summary(event) -> str:
    """One line on what an event says, for the trace table."""
    p = event.payload or {}
    if event.kind == "model_call":
        asked = f" · asks {', '.join(c.get('name', '') for c in p['tool_calls'])}" if p.get("tool_calls") else ""
        return (f"{p.get('purpose') or p.get('role', '')} · {p.get('model', '')} · "
                f"{p.get('prompt_tokens', 0)}+{p.get('completion_tokens', 0)} tokens{asked}")
    if event.kind in ("agent_finished", "route"):
        return " · ".join(str(x) for x in (p.get("status") or p.get("on"), p.get("target"), (p.get("message") or p.get("reason") or "")[:80]) if x)
    if event.kind == "judgement":
        return f"J {p['J']:.3f}" if p.get("J") is not None else f"failed: {p.get('error', '')[:80]}"
    if event.kind == "check":
        return f"{'PASS' if p.get('passed') else 'FAIL'} {p.get('name', '')}: {str(p.get('detail', ''))[:80]}"
    if event.kind == "code_execution":
        return f"{p.get('purpose', '')} · {p.get('status', '')} · exit {p.get('exit_code')}"
    if event.kind == "search_iteration":
        m = p.get("mutation") or {}
        return f"{m.get('kind', '')} on {m.get('target', '')} · {'accepted' if p.get('accepted') else 'not accepted'} ({p.get('decided_by', '')})"
    if event.kind == "evaluation":
        return f"{p.get('metric', '')} = {p.get('value')}" if p.get("ok") else str(p.get("error", ""))[:80]
    if event.kind == "handoff":
        return f"{p.get('artifact', '')} from {p.get('source', '')}: {'ok' if p.get('ok') else 'contract broken'}"
    if event.kind == "tools_discovered":
        return " · ".join(f"{s.get('name')}: {len(s.get('tools') or [])} tools" if s.get("ok") else
                          f"{s.get('name')}: NOT AVAILABLE ({str(s.get('error', ''))[:60]})" for s in p.get("servers", []))
    if event.kind == "mcp_tool_call":
        return f"calls {p.get('tool', '')} {json.dumps(p.get('arguments', {}), sort_keys=True)[:100]}"
    if event.kind == "mcp_tool_result":
        took = f"{p.get('duration_s', 0):.2f}s"
        return f"{p.get('tool', '')} · ok · {took}" if p.get("ok") else \
            f"{p.get('tool', '')} · ERROR · {took} · {str(p.get('error', ''))[:100]}"
    return ""


@register.filter
def cut_words(value, limit: int) -> str:
    """At most ``limit`` characters, cut at a word (truncatechars cuts mid-word)."""
    from webapp.runs.report_parts import cut_at_word

    return cut_at_word(str(value or ""), int(limit))
