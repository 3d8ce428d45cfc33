"""An external agent's folder: ``agent.json`` (its name, the roles it can play, its typed inputs
and outputs, its entry point ``module:function`` and its self-test), its code, and its own
``requirements.txt``. The image it runs in is named by the hash of all of it and of the Trellis
sandbox image it is built on, so a changed agent is a new image."""
from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import TrellisError
from ..harness import ROLES
from ..library.artifact import LibraryArtifact, parse_interface

AGENTS_DIR = Path(__file__).resolve().parents[2] / "external_agents"
AGENTS_ENV = "TRELLIS_AGENTS"   # further folders of external agents, separated by ':'
REPOSITORY = "trellis-agent"
MAX_AGENT_BYTES = 50_000_000
NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,40}$")
ENTRY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*$")


class ExternalAgentError(TrellisError):
    """An external agent that cannot be read, built, tested or run, and why."""


@dataclass(frozen=True)
class ExternalAgent:
    folder: Path
    name: str
    title: str
    description: str
    roles: tuple[str, ...]
    inputs: dict[str, str]
    outputs: dict[str, str]
    entry: str
    selftest: str = ""
    tags: tuple[str, ...] = field(default_factory=tuple)

    def files(self) -> list[Path]:
        """Every file of the agent's folder (no links, no caches), in a stable order."""
        out = []
        for path in sorted(self.folder.rglob("*")):
            if "__pycache__" in path.parts or path.name.startswith("."):
                continue
            if path.is_symlink():
                raise ExternalAgentError(f"{path}: a symbolic link; an agent's folder holds files only")
            if path.is_file():
                out.append(path)
        return out

    def definition_hash(self, base: str) -> str:
        digest = hashlib.sha256(base.encode())
        for path in self.files():
            digest.update(str(path.relative_to(self.folder)).encode() + b"\0" + path.read_bytes() + b"\0")
        return digest.hexdigest()

    def image_ref(self, base: str) -> str:
        return f"{REPOSITORY}-{self.name}:{self.definition_hash(base)[:16]}"

    def artifact(self, available: str = "") -> LibraryArtifact:
        """The agent as a library artifact (kind ``agent``); ``available`` says whether its image is built."""
        text = json.dumps({"name": self.name, "entry": self.entry, "inputs": self.inputs, "outputs": self.outputs})
        return LibraryArtifact(name=self.name, kind="agent", title=self.title, roles=self.roles,
                               inputs=dict(self.inputs), outputs=dict(self.outputs), tags=self.tags,
                               body=self.description, when=self.description + (f" ({available})" if available else ""),
                               source=f"agent:{self.folder}", version=hashlib.sha256(text.encode()).hexdigest())


def load_agent(folder: Path) -> ExternalAgent:
    folder = Path(folder)
    spec_path = folder / "agent.json"
    try:
        data = json.loads(spec_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ExternalAgentError(f"{spec_path}: not a readable agent description ({exc})") from exc
    if not isinstance(data, dict):
        raise ExternalAgentError(f"{spec_path}: must be a JSON object")
    name = str(data.get("name", ""))
    if not NAME.fullmatch(name):
        raise ExternalAgentError(f"{spec_path}: name {name!r} must be lower-case letters, digits and hyphens")
    roles = tuple(str(r) for r in data.get("roles") or [])
    if not roles or any(r not in ROLES for r in roles):
        raise ExternalAgentError(f"{spec_path}: roles {list(roles)} must name one or more of {', '.join(ROLES)}")
    entry = str(data.get("entry", ""))
    if not ENTRY.fullmatch(entry):
        raise ExternalAgentError(f"{spec_path}: entry {entry!r} must be module:function (e.g. profiler:run)")
    module = folder / (entry.split(":")[0].replace(".", "/") + ".py")
    if not module.is_file():
        raise ExternalAgentError(f"{spec_path}: entry {entry!r} names {module.name}, which the folder does not have")

    def interface(key: str) -> dict[str, str]:
        value = data.get(key) or {}
        if not isinstance(value, dict):
            raise ExternalAgentError(f"{spec_path}: {key} must map artifact names to contract types")
        try:
            return parse_interface("; ".join(f"{k}: {v}" for k, v in value.items()), f"{spec_path} {key}")
        except TrellisError as exc:
            raise ExternalAgentError(str(exc)) from exc

    outputs = interface("outputs")
    if not outputs:
        raise ExternalAgentError(f"{spec_path}: an agent declares what it hands on (outputs)")
    agent = ExternalAgent(folder=folder.resolve(), name=name, title=str(data.get("title") or name),
                          description=str(data.get("description", ""))[:2000], roles=roles,
                          inputs=interface("inputs"), outputs=outputs, entry=entry,
                          selftest=str(data.get("selftest", "")),
                          tags=tuple(str(t) for t in data.get("tags") or [])[:20])
    size = sum(p.stat().st_size for p in agent.files())
    if size > MAX_AGENT_BYTES:
        raise ExternalAgentError(f"{folder}: {size:,} bytes; an agent's folder is at most {MAX_AGENT_BYTES:,}")
    if agent.selftest and not (folder / agent.selftest).is_file():
        raise ExternalAgentError(f"{spec_path}: selftest {agent.selftest!r} is not in the folder")
    return agent


def agent_folders() -> list[Path]:
    roots = [AGENTS_DIR, *(Path(p) for p in os.environ.get(AGENTS_ENV, "").split(":") if p)]
    return [f for root in roots if root.is_dir() for f in sorted(root.iterdir()) if (f / "agent.json").is_file()]


def load_agents() -> tuple[list[ExternalAgent], list[str]]:
    """Every external agent found, and the problems of those that could not be read."""
    agents, problems = [], []
    for folder in agent_folders():
        try:
            agents.append(load_agent(folder))
        except ExternalAgentError as exc:
            problems.append(str(exc))
    return agents, problems


def find_agent(name: str) -> ExternalAgent:
    for folder in agent_folders():
        if folder.name == name or json.loads((folder / "agent.json").read_text(encoding="utf-8")).get("name") == name:
            return load_agent(folder)
    raise ExternalAgentError(f"no external agent {name!r} (looked in {AGENTS_DIR} and ${AGENTS_ENV})")
