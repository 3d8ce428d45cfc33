import json
from datetime import datetime, timezone

from django import template

from engine.protocol.events import AgentFinished, SearchStep
from webapp.runs.report_parts import cut_at_word

register = template.Library()


@register.filter
def kind_label(value: str) -> str:
    """``procedure_refinement`` -> ``procedure refinement``."""
    return str(value).replace("_", " ")


@register.filter
def clock(ts: float) -> str:
    """An event's unix time as UTC wall-clock time to a tenth of a second."""
    return datetime.fromtimestamp(float(ts), tz=timezone.utc).strftime("%H:%M:%S.%f")[:10]


@register.filter
def event_summary(event) -> str:
    """One line on what an event says, for the trace table (nothing for a row from before
    payloads were typed, which its kind's model refuses)."""
    if (p := event.typed) is None:
        return ""
    if event.kind == "model_call":
        asked = f" · asks {', '.join(c.get('name', '') for c in p.tool_calls)}" if p.tool_calls else ""
        return (f"{p.purpose or p.role} · {p.model} · "
                f"{p.prompt_tokens}+{p.completion_tokens} tokens{asked}")
    if event.kind in ("agent_finished", "route"):
        said = (p.status, None, p.message[:80]) if isinstance(p, AgentFinished) else (p.on, p.target, p.reason[:80])
        return " · ".join(str(x) for x in said if x)
    if event.kind == "judgement":
        return f"J {p.J:.3f}" if p.J is not None else f"failed: {p.error[:80]}"
    if event.kind == "check":
        return f"{'PASS' if p.passed else 'FAIL'} {p.name}: {p.detail[:80]}"
    if event.kind == "code_execution":
        return f"{p.purpose} · {p.status} · exit {p.exit_code}"
    if event.kind == "search_iteration":
        # a settled step or an editor's probe names its change; a tree phase has none
        m = getattr(p, "mutation", None)
        step = isinstance(p, SearchStep)
        return (f"{m.kind if m else ''} on {m.target if m else ''} · "
                f"{'accepted' if step and p.accepted else 'not accepted'} ({p.decided_by if step else ''})")
    if event.kind == "evaluation":
        return f"{p.metric or ''} = {p.value}" if p.ok else (p.error or "")[:80]
    if event.kind == "handoff":
        return f"{p.artifact} from {p.source}: {'ok' if p.ok else 'contract broken'}"
    if event.kind == "tools_discovered":
        return " · ".join(f"{s.name}: {len(s.tools)} tools" if s.ok else
                          f"{s.name}: NOT AVAILABLE ({(s.error or '')[:60]})" for s in p.servers)
    if event.kind == "mcp_tool_call":
        return f"calls {p.tool} {json.dumps(p.arguments, sort_keys=True)[:100]}"
    if event.kind == "mcp_tool_result":
        took = f"{p.duration_s:.2f}s"
        return f"{p.tool} · ok · {took}" if p.ok else f"{p.tool} · ERROR · {took} · {(p.error or '')[:100]}"
    return ""


@register.filter
def cut_words(value, limit: int) -> str:
    """At most ``limit`` characters, cut at a word (truncatechars cuts mid-word)."""
    return cut_at_word(str(value or ""), int(limit))
