"""An agent's model call with its MCP tools: offer them (litellm ``tools=``), run what the model
asks for, hand the results back as ``tool`` messages, and ask again until it answers.

Every call is traced (``mcp_tool_call``, then ``mcp_tool_result`` with the result or the error
and its duration). A refused, failed or crashed call is a result the model reads, prefixed
``ERROR:`` (prompt_format.TOOL_ERROR_PREFIX); it never stops the step. A file a tool wrote into
the run's tool-output folder and named with its sha256 (the science server's plots) is kept in
the run's artifact store, as sandbox outputs are.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .gateway import MAX_TOOL_CALLS
from .prompt_format import TOOL_ERROR_PREFIX
from .protocol.events import McpToolCall, McpToolResult
from .tools.registry import ToolSpec

if TYPE_CHECKING:
    from .gateway import Completion
    from .roles import RunContext
    from .workflow import Agent

MAX_TOOL_ROUNDS = 3          # rounds of calls in one step; then the model must answer
MAX_ARGUMENT_CHARS = 200_000  # a call's arguments, serialized (a fit's points fit well inside)


@dataclass(frozen=True)
class CallRecord:
    """One call in a step, for the role and for what the team remembers of its tools."""

    tool: str
    ok: bool
    text: str


def offered(ctx: "RunContext", agent: "Agent") -> list[ToolSpec]:
    """The agent's allocated MCP tools that this run discovered and can call."""
    if ctx.tools is None:
        return []
    return [spec for name in agent.tools if (spec := ctx.tools.registry.spec(name)) is not None]


def complete_with_tools(ctx: "RunContext", agent: "Agent", role: str, messages: list[dict],
                        temperature: float, response_schema: dict | None = None) -> "Completion":
    """The model's answer for one role step, after any tool calls it made on the way."""
    specs = offered(ctx, agent)
    gateway = ctx.gateway
    options = agent.endpoint_options()
    if not specs:
        return gateway.complete(agent.id, role, messages, agent_model=agent.model, temperature=temperature,
                                response_schema=response_schema, agent_options=options)
    functions = [s.function() for s in specs]
    by_function = {s.function_name: s for s in specs}
    messages = list(messages)
    for round_ in range(MAX_TOOL_ROUNDS + 1):
        last = round_ == MAX_TOOL_ROUNDS
        done = gateway.complete(agent.id, role, messages, agent_model=agent.model, temperature=temperature,
                                tools=functions, tool_choice="none" if last else None, agent_options=options)
        if not done.tool_calls or last:
            return done
        asked = list(done.tool_calls)
        messages.append({"role": "assistant", "content": done.text or "", "tool_calls": [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])}}
            for c in asked]})
        for i, call in enumerate(asked):
            if i >= MAX_TOOL_CALLS:
                content = f"{TOOL_ERROR_PREFIX}not run: at most {MAX_TOOL_CALLS} tool calls per answer"
            else:
                content = _run(ctx, agent, role, call, by_function.get(call["name"]))
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": content})
    raise AssertionError("not reached: the last round always returns")


def _run(ctx: "RunContext", agent: "Agent", role: str, call: dict, spec: ToolSpec | None) -> str:
    """Run one call, trace it, and return what the model reads."""
    name = spec.name if spec else str(call.get("name", ""))[:200]
    server = spec.server if spec else ""
    arguments = call.get("arguments") or {}
    shown = arguments if len(json.dumps(arguments, default=str)) <= 20_000 else {"_too_large_to_trace": True}
    ctx.tracer.emit(McpToolCall(tool=name, server=server, role=role, call_id=call["id"], arguments=shown), agent.id)
    artifacts: dict[str, str] = {}
    if spec is None:
        ok, text, error, took = False, "", f"{name!r} is not one of this agent's tools", 0.0
    elif "_unparsed" in arguments:
        ok, text, error, took = False, "", "the arguments are not a JSON object", 0.0
    elif len(json.dumps(arguments, default=str)) > MAX_ARGUMENT_CHARS:
        ok, text, error, took = False, "", f"the arguments exceed {MAX_ARGUMENT_CHARS:,} characters", 0.0
    else:
        outcome = ctx.tools.call(spec.name, arguments)
        ok, text, error, took = outcome.ok, outcome.text, outcome.error, outcome.duration_s
        if ok:
            artifacts = _keep_outputs(ctx, text, outcome.structured)
    ctx.tracer.emit(McpToolResult(tool=name, server=server, role=role, call_id=call["id"], ok=ok,
                                  result=text[:20_000], error=error, duration_s=took, artifacts=artifacts), agent.id)
    ctx.tool_calls.append(CallRecord(name, ok, text if ok else (error or "")))
    return text if ok else f"{TOOL_ERROR_PREFIX}{error}"


def _keep_outputs(ctx: "RunContext", text: str, structured: dict | None) -> dict[str, str]:
    """A file the result names (path + sha256) inside the tool-output folder, into the store."""
    data = structured
    if data is None:
        try:
            data = json.loads(text)
        except ValueError:
            return {}
    if not isinstance(data, dict) or not isinstance(data.get("path"), str) or not isinstance(data.get("sha256"), str):
        return {}
    folder = ctx.tools.output_dir if ctx.tools else None
    if folder is None:
        return {}
    path = Path(data["path"])
    try:
        real = path.resolve()
        if folder.resolve() not in real.parents or not real.is_file() or real.is_symlink():
            return {}
        content = real.read_bytes()
    except OSError:
        return {}
    if hashlib.sha256(content).hexdigest() != data["sha256"]:
        return {}  # the tool's word and the file disagree: nothing is kept under its name
    return {str(real.relative_to(folder.resolve())): ctx.store.put_bytes(content)}
