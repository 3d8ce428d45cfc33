"""Which MCP servers a run starts: ``mcp_servers.json`` at the project root, or the file named by
``TRELLIS_MCP_CONFIG`` (empty or ``none``: no servers).

    {"servers": [{"name": "science", "command": "{python}", "args": ["-m", "engine.mcp_servers.science"],
                  "env": {"TRELLIS_MCP_DATA": "{data}"}, "enabled": true,
                  "allocate": {"analyzer": ["profile_data"]}, "timeout_s": 30}]}

``command``, ``args``, ``env`` and ``cwd`` may name ``{python}`` (this interpreter), ``{root}``
(the project folder), ``{data}`` (the task's input files, ``os.pathsep``-separated), ``{base}``
(the task folder) and ``{output}`` (the run's tool-output folder). A server in Docker is only
configuration: ``"command": "docker", "args": ["run", "-i", "--rm", "--network", "none", ...]``.
``allocate`` gives the tools of a server to the agents playing a role in a team Trellis builds
(engine/tools/allocation.py); the mutations move them afterwards.
"""
from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from ..errors import TrellisError
from ..harness import ROLES

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CONFIG = PROJECT_ROOT / "mcp_servers.json"
ENV_VARIABLE = "TRELLIS_MCP_CONFIG"
NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")   # it becomes part of tool names: mcp.<server>.<tool>
FIELDS = {"name", "command", "args", "env", "enabled", "allocate", "timeout_s", "cwd", "description"}
MAX_SERVERS = 20
MAX_TIMEOUT_S = 600.0


class McpConfigError(TrellisError):
    """The MCP server configuration cannot be used; the message names the file and the entry."""


@dataclass(frozen=True)
class ServerConfig:
    name: str
    command: str
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    enabled: bool = True
    allocate: dict[str, tuple[str, ...]] = field(default_factory=dict)  # role -> tool names (short)
    timeout_s: float = 30.0   # to start and list tools; each call has the same limit
    cwd: str = "{root}"
    description: str = ""

    def launch(self, values: Mapping[str, str]) -> tuple[str, list[str], dict[str, str], str]:
        """(command, args, env, cwd) with the placeholders filled in."""
        fill = {"python": sys.executable, "root": str(PROJECT_ROOT), **values}

        def sub(text: str) -> str:
            return re.sub(r"\{(\w+)\}", lambda m: fill.get(m.group(1), m.group(0)), text)

        return sub(self.command), [sub(a) for a in self.args], {k: sub(v) for k, v in self.env.items()}, sub(self.cwd)


def config_path(env: Mapping[str, str] = os.environ) -> Path | None:
    """The configuration file in force: None when TRELLIS_MCP_CONFIG is empty or 'none'."""
    value = env.get(ENV_VARIABLE)
    if value is None:
        return DEFAULT_CONFIG
    if value.strip().lower() in {"", "none", "off"}:
        return None
    return Path(value)


def load_config(path: Path | None = None, env: Mapping[str, str] = os.environ) -> list[ServerConfig]:
    """The enabled servers of ``path`` (default: config_path()). A missing default file means no
    servers; a named file that is missing or malformed is an McpConfigError."""
    named = path is not None or env.get(ENV_VARIABLE) is not None
    path = path if path is not None else config_path(env)
    if path is None:
        return []
    if not path.exists():
        if named:
            raise McpConfigError(f"MCP server configuration {path} does not exist ({ENV_VARIABLE} names it)")
        return []
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise McpConfigError(f"MCP server configuration {path} cannot be read: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise McpConfigError(f"MCP server configuration {path} is not JSON: {exc.msg} at line {exc.lineno}") from exc
    return [s for s in parse_config(data, str(path)) if s.enabled]


def parse_config(data: object, where: str = "the MCP configuration") -> list[ServerConfig]:
    """Every server of a configuration object, enabled or not; McpConfigError lists every problem."""
    if isinstance(data, dict) and set(data) <= {"servers"}:
        data = data.get("servers", [])
    if not isinstance(data, list):
        raise McpConfigError(f"{where}: expected {{\"servers\": [...]}}, a list of server entries")
    if len(data) > MAX_SERVERS:
        raise McpConfigError(f"{where}: {len(data)} servers; the limit is {MAX_SERVERS}")
    problems: list[str] = []
    servers: list[ServerConfig] = []
    for i, entry in enumerate(data):
        label = f"server {i + 1}" + (f" ({entry.get('name')!r})" if isinstance(entry, dict) and entry.get("name") else "")
        found = _entry_problems(entry)
        if found:
            problems += [f"{label}: {p}" for p in found]
            continue
        servers.append(ServerConfig(
            name=entry["name"], command=entry["command"], args=tuple(entry.get("args", ())), env=dict(entry.get("env", {})),
            enabled=entry.get("enabled", True),
            allocate={role: tuple(tools) for role, tools in entry.get("allocate", {}).items()},
            timeout_s=float(entry.get("timeout_s", 30.0)), cwd=entry.get("cwd", "{root}"),
            description=entry.get("description", "")))
    names = [s.name for s in servers]
    problems += [f"two servers are called {n!r}; names must be unique" for n in sorted({n for n in names if names.count(n) > 1})]
    if problems:
        raise McpConfigError(f"{where} is not usable:\n- " + "\n- ".join(problems))
    return servers


def _entry_problems(entry: object) -> list[str]:
    if not isinstance(entry, dict):
        return ["an entry is an object with name and command"]
    out = [f"unknown field {k!r}; fields are {', '.join(sorted(FIELDS))}" for k in sorted(set(entry) - FIELDS)]
    name = entry.get("name")
    if not isinstance(name, str) or not NAME.fullmatch(name):
        out.append(f"name {name!r} must be 1-32 lower-case letters, digits or '_', starting with a letter "
                   "(it becomes part of each tool's name, mcp.<server>.<tool>)")
    if not isinstance(entry.get("command"), str) or not entry["command"].strip():
        out.append("command must be a non-empty string (the program to start, e.g. '{python}' or 'docker')")
    if not _strings(entry.get("args", [])):
        out.append("args must be a list of strings")
    env = entry.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        out.append("env must map names to string values")
    if not isinstance(entry.get("enabled", True), bool):
        out.append("enabled must be true or false")
    if not isinstance(entry.get("cwd", ""), str) or not isinstance(entry.get("description", ""), str):
        out.append("cwd and description must be strings")
    timeout = entry.get("timeout_s", 30.0)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= MAX_TIMEOUT_S:
        out.append(f"timeout_s must be a number of seconds in (0, {MAX_TIMEOUT_S:g}]")
    allocate = entry.get("allocate", {})
    if not isinstance(allocate, dict) or not all(_strings(v) for v in allocate.values()):
        out.append("allocate must map roles to lists of tool names")
    else:
        out += [f"allocate names role {r!r}; roles are {', '.join(ROLES)}" for r in allocate if r not in ROLES]
    return out


def _strings(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(x, str) for x in value)
