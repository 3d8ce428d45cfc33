"""The tools a run can allocate to agents: the built-in sandbox and what MCP discovery found.

A discovered tool is named ``mcp.<server>.<tool>``. The registry in force (``use``) is what the
workflow rules check an agent's tools against (engine/workflow.py): a search or a run puts the
registry it discovered in force for its duration, the studio the one a run's trace recorded.
With none in force (a workflow file read on its own), an ``mcp.`` name is only checked for its
form; the run that executes it checks it against what it discovered.
"""
from __future__ import annotations

import contextlib
import json
import re
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Iterator

from ..protocol.events import ToolsDiscovered

BUILTIN_TOOLS = ("sandbox.python",)
MCP_PREFIX = "mcp."
MAX_SCHEMA_CHARS = 20_000
TOOL_NAME = re.compile(r"mcp\.([a-z][a-z0-9_]{0,31})\.([A-Za-z0-9_-]{1,64})")


@dataclass(frozen=True)
class ToolSpec:
    """One discovered tool, as a model is offered it."""

    server: str
    tool: str                 # its name on the server
    description: str = ""
    input_schema: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{MCP_PREFIX}{self.server}.{self.tool}"

    @property
    def function_name(self) -> str:
        """The name a model calls it by: function names allow no dots (OpenAI: [A-Za-z0-9_-]{1,64})."""
        return f"mcp__{self.server}__{self.tool}"[:64]

    def function(self) -> dict:
        """The litellm/OpenAI ``tools=`` entry for this tool."""
        schema = self.input_schema if self.input_schema.get("type") == "object" else {"type": "object", "properties": {}}
        if len(json.dumps(schema, default=str)) > MAX_SCHEMA_CHARS:  # a server's schema goes into every request
            schema = {"type": "object", "properties": {k: {} for k in list(schema.get("properties") or {})[:50]}}
        return {"type": "function", "function": {"name": self.function_name, "description": self.description[:1000],
                                                 "parameters": schema}}

    def to_dict(self) -> dict:
        return {"name": self.name, "server": self.server, "tool": self.tool, "description": self.description,
                "input_schema": self.input_schema}

    @classmethod
    def from_dict(cls, d: dict) -> "ToolSpec":
        return cls(str(d["server"]), str(d["tool"]), str(d.get("description", "")), dict(d.get("input_schema") or {}))


@dataclass
class ToolRegistry:
    """The tools discovered at a run's start, and the servers that offered none (why)."""

    specs: dict[str, ToolSpec] = field(default_factory=dict)      # name -> spec
    failed: dict[str, str] = field(default_factory=dict)          # server -> why it has no tools
    allocate: dict[str, dict[str, tuple[str, ...]]] = field(default_factory=dict)  # server -> role -> tools

    def names(self) -> tuple[str, ...]:
        return (*BUILTIN_TOOLS, *sorted(self.specs))

    def spec(self, name: str) -> ToolSpec | None:
        return self.specs.get(name)

    def by_function(self, function_name: str) -> ToolSpec | None:
        return next((s for s in self.specs.values() if s.function_name == function_name), None)

    def problem(self, name: str) -> str | None:
        """Why ``name`` cannot be allocated here (None: it can). A tool of a server that failed
        to start is no problem of the workflow: the run goes on without it."""
        if name in BUILTIN_TOOLS or name in self.specs:
            return None
        m = TOOL_NAME.fullmatch(name)
        if m and m.group(1) in self.failed:
            return None
        return f"unknown tool {name!r}; available tools are {', '.join(self.names())}"

    def for_role(self, role: str) -> tuple[str, ...]:
        """The discovered tools the configuration allocates to ``role``."""
        out = []
        for server, roles in sorted(self.allocate.items()):
            out += [f"{MCP_PREFIX}{server}.{t}" for t in roles.get(role, ()) if f"{MCP_PREFIX}{server}.{t}" in self.specs]
        return tuple(out)

    def to_event(self) -> dict:
        return {"tools": [s.to_dict() for _, s in sorted(self.specs.items())], "failed": dict(sorted(self.failed.items()))}

    @classmethod
    def from_event(cls, discovered: ToolsDiscovered) -> "ToolRegistry":
        """The registry a ``tools_discovered`` event (its typed payload) says was found: the tools
        listed, and each server that offered none with why."""
        specs = [ToolSpec(t.server, t.tool, t.description, dict(t.input_schema)) for t in discovered.tools]
        return cls({s.name: s for s in specs}, {s.name: s.error or "" for s in discovered.servers if not s.ok})


_IN_FORCE: ContextVar[ToolRegistry | None] = ContextVar("trellis_tool_registry", default=None)


def in_force() -> ToolRegistry | None:
    return _IN_FORCE.get()


@contextlib.contextmanager
def use(registry: ToolRegistry | None) -> Iterator[ToolRegistry | None]:
    """Check agents' tools against ``registry`` inside the block (None: keep the one in force)."""
    if registry is None:
        yield in_force()
        return
    token = _IN_FORCE.set(registry)
    try:
        yield registry
    finally:
        _IN_FORCE.reset(token)


def tool_problem(name: str) -> str | None:
    """Why an agent cannot be given tool ``name`` under the registry in force (None: it can)."""
    registry = in_force()
    if registry is not None:
        return registry.problem(name)
    if name in BUILTIN_TOOLS or (isinstance(name, str) and TOOL_NAME.fullmatch(name)):
        return None
    return (f"unknown tool {str(name)[:80]!r}; tools are {', '.join(BUILTIN_TOOLS)} and the discovered MCP tools, "
            "named mcp.<server>.<tool>")
