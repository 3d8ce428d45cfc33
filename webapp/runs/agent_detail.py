"""What one agent of the workflow last did, for the panel a click on its node opens: the inputs
it was handed (and the contracts they met), the prompt it sent and the answer it got, the code it
ran and what that printed. Each part is the latest event of its kind for that agent, read from
the run's events (indexed by agent and kind), with a link to the event in the trace."""
from __future__ import annotations

from dataclasses import dataclass, field

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from . import visibility
from .models import Event, Run, typed
from .report_parts import cut_at_word

PREVIEW_CHARS = 4000


@dataclass
class Part:
    title: str
    seq: int
    iteration: int
    text: str = ""
    chars: int = 0
    code: bool = False
    facts: list[tuple[str, str]] = field(default_factory=list)


def _latest(run: Run, agent: str, kind: str, **payload) -> Event | None:
    qs = run.events.filter(agent=agent, kind=kind)
    if payload:
        qs = run.events.filter(kind=kind, **{f"payload__{k}": v for k, v in payload.items()})
    return qs.order_by("-seq").first()


def _prompt(messages: list) -> str:
    parts = []
    for message in messages or []:
        if isinstance(message, dict):
            content = message.get("content")
            if isinstance(content, list):  # content parts: the text ones
                content = "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            parts.append(f"[{message.get('role', '?')}]\n{content or ''}")
    return "\n\n".join(parts)


def attachment_parts(run: Run, agent: str) -> list[Part]:
    """What the agent was given from the library, in the run's latest version of the workflow,
    and where synthesis got each (the ``synthesize`` stage's reasons)."""
    version = run.versions.order_by("-number").first()
    agents = (version.data if version is not None else {}).get("agents") or []
    attached = next((a.get("attachments") or [] for a in agents if a.get("id") == agent), [])
    if not attached:
        return []
    stage = run.events.filter(kind="synthesis_stage", payload__stage="synthesize").order_by("-seq").first()
    why = {}
    synthesized = typed(stage)
    if synthesized is not None:
        for chosen in (synthesized.outputs.get("attachments") or {}).values():
            for c in chosen:
                if c.get("agent") == agent:
                    why[str(c.get("ref", "")).split("@")[0]] = f"{c.get('why', '')} · from {c.get('source', '')}"
    parts = []
    for x in attached:
        ref = f"{x.get('kind')}:{x.get('name')}"
        text = str(x.get("text", ""))
        parts.append(Part(f"From the library: {x.get('title') or x.get('name')}", stage.seq if stage else 0,
                          stage.iteration if stage else 0, cut_at_word(text, PREVIEW_CHARS), len(text),
                          facts=[("artifact", f"{ref}@{str(x.get('version', ''))[:12]}"),
                                 ("for the role", x.get("role") or "every role it plays"),
                                 ("interface", x.get("interface") or "-")]
                          + ([("why", why[ref])] if ref in why else [])))
    return parts


def agent_parts(run: Run, agent: str) -> list[Part]:
    parts: list[Part] = attachment_parts(run, agent)
    started = _latest(run, agent, "agent_started")
    if started is not None:
        p = typed(started)
        if p is not None:
            parts.append(Part("Inputs", started.seq, started.iteration,
                              facts=[("roles", ", ".join(p.roles)),
                                     ("inputs", ", ".join(p.inputs) or "the task only")]
                              + ([("sent back by", p.retry_of)] if p.retry_of else [])))
        handoff = _latest(run, agent, "handoff", target=agent)
        h = typed(handoff)
        if h is not None:
            preview = h.value_preview
            text = preview if isinstance(preview, str) else ("" if preview is None else str(preview))
            parts.append(Part(f"Handed over by {h.source}: {h.artifact}", handoff.seq,
                              handoff.iteration, cut_at_word(text, PREVIEW_CHARS), len(text),
                              facts=[("contract", h.contract),
                                     ("met", "yes" if h.ok else "no: " + "; ".join(h.errors))]))
    call = _latest(run, agent, "model_call")
    p = typed(call)
    if p is not None:
        prompt = _prompt(p.messages)
        parts.append(Part("Prompt", call.seq, call.iteration, cut_at_word(prompt, PREVIEW_CHARS), len(prompt),
                          facts=[("model", p.model), ("purpose", p.purpose),
                                 ("tokens", f"{p.prompt_tokens:,} in, {p.completion_tokens:,} out")]))
        answer = p.response
        parts.append(Part("Answer", call.seq, call.iteration, cut_at_word(answer, PREVIEW_CHARS), len(answer),
                          facts=[("finish", str(p.finish_reason or "stop"))]))
    tool = _latest(run, agent, "tool_call")
    t = typed(tool)
    if t is not None:
        code = t.code
        parts.append(Part("Code", tool.seq, tool.iteration, cut_at_word(code, PREVIEW_CHARS), len(code), code=True,
                          facts=[("purpose", t.purpose), ("sandbox", t.executor)]))
    execution = _latest(run, agent, "code_execution")
    p = typed(execution)
    if p is not None:
        output = (p.stdout_tail or "") + (("\n--- stderr ---\n" + p.stderr_tail) if p.stderr_tail else "")
        parts.append(Part("Output", execution.seq, execution.iteration, cut_at_word(output, PREVIEW_CHARS), len(output), code=True,
                          facts=[("status", p.status), ("exit code", str(p.exit_code)),
                                 ("files", ", ".join(sorted(p.files)) or "none"),
                                 ("took", f"{float(p.duration_s or 0):.1f} s")]))
    return parts


def agent_detail(request: HttpRequest, run_id: int, agent: str) -> HttpResponse:
    run, _ = visibility.run_for(request.user, run_id)
    if len(agent) > 120:
        raise Http404("no such agent")
    parts = agent_parts(run, agent)
    return render(request, "runs/_agent_detail.html", {"run": run, "agent": agent, "parts": parts})
