"""The workflow: a DAG of agents whose edges carry typed artifact contracts.

networkx holds the graph; this module adds the rules a scientist cares about and a stable
content hash, so that the same workflow always has the same identity.
"""
from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import networkx as nx

from .contracts import ContractSyntaxError, Type, is_assignable, parse_type
from .errors import WorkflowValidationError
from .evidence.graph import RECORD_KINDS
from .harness import ROLE_GIVES, ROLE_NEEDS, ROLES, Harness
from .limits import (MAX_AGENTS, MAX_EDGES, MAX_NAME_CHARS, MAX_PROCEDURE_CHARS, MAX_PROMPT_CHARS, MAX_QUERY_HINT_CHARS,
                     MAX_QUERY_HINTS, MAX_RECORD_LIMIT, MAX_ROUTES, contract_problem, model_problem, number_problem,
                     text_problem)
from .models import ModelOptions, ModelSettingsError
from .tools.registry import BUILTIN_TOOLS, tool_problem

STATUSES = ("SUCCESS", "RETRY", "FALLBACK", "FAILURE")
ENGINE_INPUTS = {"task": "markdown"}  # artifacts the engine itself gives every agent
KNOWN_TOOLS = BUILTIN_TOOLS  # and the MCP tools a run discovered (engine/tools/registry.py)
MAX_ROUTE_LOOPS = 10
MAX_AGENT_TOOLS = 50
MAX_ATTACHMENTS = 12
ATTACHMENT_KINDS = ("skill", "resource", "tool", "agent")


@dataclass(frozen=True)
class Attachment:
    """A library artifact attached to an agent by synthesis (AgentCo-op's phi: R -> 2^S) or by a
    person: its text travels with the workflow, so the workflow alone says what the agent was
    given and its hash changes when the attached text does."""

    kind: str        # skill | resource | tool | agent
    name: str
    version: str     # sha256 of the artifact's text in the library it came from
    title: str = ""
    text: str = ""   # a skill's procedure, a resource's text (a tool's is its server's)
    interface: str = ""
    role: str = ""   # the role of the agent it is for ("" for every role the agent plays)

    @property
    def ref(self) -> str:
        return f"{self.kind}:{self.name}@{self.version[:12]}"

    def to_dict(self) -> dict:
        return {"kind": self.kind, "name": self.name, "version": self.version, "title": self.title,
                "text": self.text, "interface": self.interface, "role": self.role}

    @classmethod
    def from_dict(cls, d: dict) -> "Attachment":
        return cls(kind=str(d["kind"]), name=str(d["name"]), version=str(d.get("version", "")),
                   title=str(d.get("title", "")), text=str(d.get("text", "")), interface=str(d.get("interface", "")),
                   role=str(d.get("role", "")))


@dataclass(frozen=True)
class Agent:
    id: str
    roles: tuple[str, ...]
    inputs: dict[str, str] = field(default_factory=dict)    # artifact name -> contract type
    outputs: dict[str, str] = field(default_factory=dict)
    tools: tuple[str, ...] = ()
    model: str | None = None
    prompt: str = ""  # agent-specific instructions on top of its roles' procedures
    # how to reach the agent's model (engine/models.py: api_base, api_key_env, max_answer_tokens,
    # context_tokens, timeout_s, prices, structured), as plain JSON so the workflow hashes as before
    model_options: dict = field(default_factory=dict)
    attachments: tuple[Attachment, ...] = ()

    def endpoint_options(self) -> "ModelOptions | None":
        return ModelOptions.from_dict(self.model_options, f"agent {self.id!r} model_options") \
            if self.model_options else None

    @property
    def role(self) -> str:
        return self.roles[0]

    def to_dict(self) -> dict:
        return {"id": self.id, "roles": list(self.roles), "inputs": dict(sorted(self.inputs.items())),
                "outputs": dict(sorted(self.outputs.items())), "tools": sorted(set(self.tools)),
                "model": self.model, "prompt": self.prompt,
                **({"model_options": dict(sorted(self.model_options.items()))} if self.model_options else {}),
                # only when there are some, so a workflow without attachments hashes as before
                **({"attachments": [x.to_dict() for x in self.attachments]} if self.attachments else {})}

    @classmethod
    def from_dict(cls, d: dict) -> "Agent":
        roles = d.get("roles") or ([d["role"]] if d.get("role") else [])
        return cls(id=str(d["id"]), roles=tuple(roles), inputs=dict(d.get("inputs", {})),
                   outputs=dict(d.get("outputs", {})), tools=tuple(str(t) for t in d.get("tools", ())),
                   model=d.get("model"), prompt=d.get("prompt", ""), model_options=dict(d.get("model_options") or {}),
                   attachments=tuple(Attachment.from_dict(x) for x in d.get("attachments") or ()))


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    artifact: str
    contract: str

    def to_dict(self) -> dict:
        return {"source": self.source, "target": self.target, "artifact": self.artifact, "contract": self.contract}


@dataclass(frozen=True)
class Route:
    """Control flow on an agent's status: e.g. verifier RETRY -> debugger, at most N times.
    Routes go back to an upstream agent, so they are loops with caps, not DAG edges."""

    source: str
    on: str
    target: str
    max_loops: int = 3

    def to_dict(self) -> dict:
        return {"source": self.source, "on": self.on, "target": self.target, "max_loops": self.max_loops}


@dataclass(frozen=True)
class Workflow:
    name: str
    agents: tuple[Agent, ...]
    edges: tuple[Edge, ...]
    routes: tuple[Route, ...] = ()
    harness: Harness = field(default_factory=Harness)
    version: int = 1
    parent_hash: str | None = None
    note: str = ""

    # --- identity -------------------------------------------------------------------------
    def content(self) -> dict:
        """Everything that changes behaviour; version, parent and note do not."""
        return {
            "agents": [a.to_dict() for a in sorted(self.agents, key=lambda a: a.id)],
            "edges": [e.to_dict() for e in sorted(self.edges, key=lambda e: (e.source, e.target, e.artifact))],
            "routes": [r.to_dict() for r in sorted(self.routes, key=lambda r: (r.source, r.on))],
            "harness": self.harness.to_dict(),
        }

    @property
    def hash(self) -> str:
        canonical = json.dumps(self.content(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()

    def to_dict(self) -> dict:
        """Declaration order is kept (it breaks ties in the run order); the hash ignores it."""
        return {"name": self.name, "version": self.version, "parent_hash": self.parent_hash,
                "note": self.note, "hash": self.hash,
                "agents": [a.to_dict() for a in self.agents], "edges": [e.to_dict() for e in self.edges],
                "routes": [r.to_dict() for r in self.routes], "harness": self.harness.to_dict()}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True, ensure_ascii=False)

    @classmethod
    def from_dict(cls, d: dict) -> "Workflow":
        try:
            wf = cls(
                name=d.get("name", "workflow"),
                agents=tuple(Agent.from_dict(a) for a in d.get("agents", [])),
                edges=tuple(Edge(e["source"], e["target"], e["artifact"], e["contract"]) for e in d.get("edges", [])),
                routes=tuple(Route(r["source"], r["on"], r["target"], int(r.get("max_loops", 3)))
                             for r in d.get("routes", [])),
                harness=Harness.from_dict(d.get("harness", {})),
                version=int(d.get("version", 1)),
                parent_hash=d.get("parent_hash"),
                note=d.get("note", ""),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise WorkflowValidationError([f"workflow JSON is malformed: {exc!r}"]) from exc
        if d.get("hash") and d["hash"] != wf.hash:
            raise WorkflowValidationError([f"workflow JSON says hash {d['hash'][:12]} but its content hashes to "
                                           f"{wf.hash[:12]}; it was edited by hand or corrupted"])
        return wf

    @classmethod
    def from_json(cls, text: str) -> "Workflow":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise WorkflowValidationError([f"workflow JSON does not parse: {exc.msg} at line {exc.lineno}"]) from exc
        if not isinstance(data, dict):
            raise WorkflowValidationError(["workflow JSON must be an object"])
        return cls.from_dict(data)

    def derive(self, note: str = "", **changes: Any) -> "Workflow":
        """A new version whose parent is this one."""
        return replace(self, version=self.version + 1, parent_hash=self.hash, note=note, **changes)

    # --- graph ----------------------------------------------------------------------------
    def agent(self, agent_id: str) -> Agent:
        try:
            return self._by_id[agent_id]
        except KeyError:
            raise KeyError(agent_id) from None

    @cached_property
    def _by_id(self) -> dict[str, Agent]:
        # the first agent of a name, as the linear lookup found it (a duplicate is a rule broken)
        out: dict[str, Agent] = {}
        for a in self.agents:
            out.setdefault(a.id, a)
        return out

    def graph(self) -> nx.MultiDiGraph:
        g = nx.MultiDiGraph()
        for a in self.agents:
            g.add_node(a.id, agent=a)
        for e in self.edges:
            g.add_edge(e.source, e.target, key=e.artifact, edge=e)
        return g

    def order(self) -> list[str]:
        """Agents in a deterministic topological order (ties broken by declaration order)."""
        position = {a.id: i for i, a in enumerate(self.agents)}
        return list(nx.lexicographical_topological_sort(self.graph(), key=lambda n: position[n]))

    def incoming(self, agent_id: str) -> list[Edge]:
        return list(self._incoming.get(agent_id, ()))

    @cached_property
    def _incoming(self) -> dict[str, list[Edge]]:
        # a scan of every edge per step was a tenth of a node's time at 1000 agents
        out: dict[str, list[Edge]] = {}
        for e in self.edges:
            out.setdefault(e.target, []).append(e)
        return out

    def between(self, start: str, end: str) -> list[str]:
        """Agents to run again when a route sends work back from ``end`` to ``start``, in run order."""
        g = self.graph()
        again = ({start} | nx.descendants(g, start)) & ({end} | nx.ancestors(g, end))
        return [a for a in self.order() if a in again]

    def route_for(self, agent_id: str, status: str) -> Route | None:
        return next((r for r in self.routes if r.source == agent_id and r.on == status), None)

    # --- rules ----------------------------------------------------------------------------
    def problems(self) -> list[str]:
        """Every rule this workflow breaks, worded for a scientist. Empty means valid."""
        out: list[str] = []
        ids = [a.id for a in self.agents]
        if not self.agents:
            return ["the workflow has no agents"]
        shape = _shape_problems(self)
        if shape:  # the other rules cost time in the workflow's size; refuse an oversize one first
            return shape
        sizes = _size_problems(self)
        if sizes:  # reported alone, so that no later message repeats a megabyte of text
            return sizes
        for dup in sorted(i for i, n in Counter(ids).items() if n > 1):
            out.append(f"two agents are both called {dup!r}; agent names must be unique")
        known = set(ids)
        types: dict[tuple[str, str, str], Type] = {}
        for a in self.agents:
            out += _agent_problems(a, types)
        for e in self.edges:
            out += _edge_problems(e, known, self, types)
        out += _cycle_problems(self, known)
        out += _unproduced_input_problems(self, known)
        out += _route_problems(self, known)
        return out

    def validate(self) -> "Workflow":
        problems = self.problems()
        if problems:
            raise WorkflowValidationError(problems)
        return self


def _shape_problems(wf: Workflow) -> list[str]:
    return [f"the workflow has {len(items):,} {label}; the limit is {cap:,}"
            for label, items, cap in (("agents", wf.agents, MAX_AGENTS), ("edges", wf.edges, MAX_EDGES),
                                      ("routes", wf.routes, MAX_ROUTES))
            if len(items) > cap]


def _size_problems(wf: Workflow) -> list[str]:
    """Text and numbers too large to hand a model or to store (limits live in engine/limits.py)."""
    checks: list[str | None] = []
    for a in wf.agents:
        checks.append(text_problem(f"agent id {a.id[:40]!r}", a.id, MAX_NAME_CHARS))
        checks.append(text_problem(f"agent {a.id[:40]!r} prompt", a.prompt, MAX_PROMPT_CHARS))
        if len(a.attachments) > MAX_ATTACHMENTS:
            checks.append(f"agent {a.id[:40]!r} has {len(a.attachments)} attachments; the limit is {MAX_ATTACHMENTS}")
        for x in a.attachments[:MAX_ATTACHMENTS]:
            checks.append(text_problem(f"agent {a.id[:40]!r} attachment name", x.name, MAX_NAME_CHARS * 4))
            checks.append(text_problem(f"agent {a.id[:40]!r} attachment {x.name[:40]!r} title", x.title, MAX_NAME_CHARS * 4))
            checks.append(text_problem(f"agent {a.id[:40]!r} attachment {x.name[:40]!r}", x.text, MAX_PROCEDURE_CHARS))
        if len(a.tools) > MAX_AGENT_TOOLS:
            checks.append(f"agent {a.id[:40]!r} has {len(a.tools)} tools; the limit is {MAX_AGENT_TOOLS}")
        if a.model is not None:
            checks.append(model_problem(f"agent {a.id[:40]!r} model", a.model))
        if a.model_options:
            checks.append(_options_problem(a))
        checks += [text_problem(f"agent {a.id[:40]!r} artifact name {str(name)[:40]!r}", name, MAX_NAME_CHARS)
                   for name in (*a.inputs, *a.outputs)]
    names = [*((e.source, e.target, e.artifact) for e in wf.edges), *((r.source, r.target) for r in wf.routes)]
    checks += [text_problem(f"the name {str(n)[:40]!r} on an edge or route", n, MAX_NAME_CHARS)
               for group in names for n in group]
    for role, text in wf.harness.procedures.items():
        checks.append(text_problem(f"the {str(role)[:40]} procedure", text, MAX_PROCEDURE_CHARS))
    checks += memory_problems(wf.harness.memory)
    return [c for c in checks if c]


def _agent_problems(a: Agent, types: dict[tuple[str, str, str], Type]) -> list[str]:
    out: list[str] = []
    if not a.roles:
        out.append(f"agent {a.id!r} has no role; give it one of {', '.join(ROLES)}")
    for r in a.roles:
        if r not in ROLES:
            out.append(f"agent {a.id!r} has unknown role {r!r}; roles are {', '.join(ROLES)}")
    for x in a.attachments:
        if x.kind not in ATTACHMENT_KINDS:
            out.append(f"agent {a.id!r} has an attachment of unknown kind {x.kind[:40]!r}; kinds are "
                       f"{', '.join(ATTACHMENT_KINDS)}")
        if x.role and x.role not in a.roles:
            out.append(f"agent {a.id!r} has {x.kind} {x.name[:80]!r} attached for the {x.role[:40]}, a role it does not play")
        if x.kind == "tool" and x.name not in a.tools:
            out.append(f"agent {a.id!r} has tool {x.name[:80]!r} attached but not among its tools")
    for t in a.tools:
        problem = tool_problem(t)  # against the tools the run discovered, when one is in force
        if problem:
            out.append(f"agent {a.id!r} asks for {problem}")
    for side, decl in (("input", a.inputs), ("output", a.outputs)):
        for name, text in decl.items():
            problem = contract_problem(f"agent {a.id!r} {side} {name!r}: the type", text)
            if problem:
                out.append(problem)
                continue
            try:
                types[(a.id, side, name)] = parse_type(text)
            except ContractSyntaxError as exc:
                out.append(f"agent {a.id!r} {side} {name!r}: {exc.problem} in type {text!r}")
    if any(r not in ROLES for r in a.roles):
        return out
    available = set(a.inputs) | set(ENGINE_INPUTS)
    for r in a.roles:
        missing = [n for n in ROLE_NEEDS[r] if n not in available]
        if missing:
            out.append(f"agent {a.id!r} plays {r} but has no {' or '.join(missing)} to work from; "
                       f"add an input edge carrying it or a role before {r} that produces it")
        available |= set(ROLE_GIVES[r])
        if "sandbox.python" not in a.tools and r in {"analyzer", "verifier"}:
            out.append(f"agent {a.id!r} plays {r}, which runs code, but lacks the tool 'sandbox.python'")
    for name in a.outputs:
        if name not in available:
            out.append(f"agent {a.id!r} declares output {name!r} but none of its roles "
                       f"({', '.join(a.roles)}) produces it")
    return out


def _edge_problems(e: Edge, known: set[str], wf: Workflow, types: dict) -> list[str]:
    label = f"edge {e.source} -> {e.target} ({e.artifact})"
    out = [f"{label} points to agent {end!r}, which does not exist (dangling edge)"
           for end in (e.source, e.target) if end not in known]
    if out:
        return out
    problem = contract_problem(f"{label}: the contract", e.contract)
    if problem:
        return [problem]
    try:
        contract = parse_type(e.contract)
    except ContractSyntaxError as exc:
        return [f"{label}: contract {e.contract!r} is not a valid type: {exc.problem}"]
    src, dst = wf.agent(e.source), wf.agent(e.target)
    if e.artifact not in src.outputs:
        out.append(f"{label}: {e.source!r} does not produce {e.artifact!r} (it produces "
                   f"{', '.join(src.outputs) or 'nothing'})")
    elif (e.source, "output", e.artifact) in types and not is_assignable(types[(e.source, "output", e.artifact)], contract):
        out.append(f"{label}: {e.source!r} produces {e.artifact!r} as {src.outputs[e.artifact]}, "
                   f"which does not satisfy the edge contract {e.contract}")
    if e.artifact not in dst.inputs:
        out.append(f"{label}: {e.target!r} does not take {e.artifact!r} as an input")
    elif (e.target, "input", e.artifact) in types and not is_assignable(contract, types[(e.target, "input", e.artifact)]):
        out.append(f"{label}: the edge contract {e.contract} does not give {e.target!r} the "
                   f"{dst.inputs[e.artifact]} it expects for {e.artifact!r}")
    return out


def _cycle_problems(wf: Workflow, known: set[str]) -> list[str]:
    g = nx.DiGraph()
    g.add_nodes_from(known)
    g.add_edges_from((e.source, e.target) for e in wf.edges if e.source in known and e.target in known)
    out = []
    for cycle in nx.simple_cycles(g):
        path = " -> ".join([*cycle, cycle[0]])
        out.append(f"agents {path} form a cycle; artifacts must flow one way "
                   f"(use a RETRY route with a loop cap to send work back)")
        if len(out) >= 5:
            break
    return out


def _unproduced_input_problems(wf: Workflow, known: set[str]) -> list[str]:
    fed = {(e.target, e.artifact) for e in wf.edges if e.source in known}
    return [f"agent {a.id!r} needs input {name!r} but no upstream agent produces it"
            for a in wf.agents for name in a.inputs
            if name not in ENGINE_INPUTS and (a.id, name) not in fed]


def _route_problems(wf: Workflow, known: set[str]) -> list[str]:
    out: list[str] = []
    g = nx.DiGraph([(e.source, e.target) for e in wf.edges if e.source in known and e.target in known])
    g.add_nodes_from(known)
    for r in wf.routes:
        label = f"route {r.source} --{r.on}--> {r.target}"
        if r.on not in STATUSES or r.on == "SUCCESS":
            out.append(f"{label}: routes trigger on RETRY, FALLBACK or FAILURE, not {r.on!r}")
        missing = [x for x in (r.source, r.target) if x not in known]
        if missing:
            out.append(f"{label} names agent(s) {', '.join(map(repr, missing))} that do not exist")
            continue
        if r.target != r.source and not nx.has_path(g, r.target, r.source):
            out.append(f"{label}: {r.target!r} is not upstream of {r.source!r}, so the work cannot flow back to it")
        if not 1 <= r.max_loops <= MAX_ROUTE_LOOPS:
            out.append(f"{label}: loop cap must be between 1 and {MAX_ROUTE_LOOPS}, not {r.max_loops}")
    return out


def memory_problems(memory) -> list[str]:
    """Every way a memory policy is unusable: an unknown role or record kind, a limit out of
    range, too many or too long query hints. Empty when it is usable."""
    out: list[str | None] = []
    for role, m in sorted(memory.roles.items()):
        if role not in ROLES:
            out.append(f"the memory policy names role {str(role)[:40]!r}; roles are {', '.join(ROLES)}")
            continue
        for what, kinds in (("records", m.records), ("retrieves", m.retrieves), ("subscribes", m.subscribes)):
            unknown = [k for k in kinds if k not in RECORD_KINDS]
            if unknown:
                out.append(f"the {role}'s memory policy {what} unknown record kind(s) "
                           f"{', '.join(repr(k[:40]) for k in unknown[:5])}; kinds are {', '.join(RECORD_KINDS)}")
        out.append(number_problem(f"the {role}'s memory record limit", m.limit, 0, MAX_RECORD_LIMIT))
        if len(m.hints) > MAX_QUERY_HINTS:
            out.append(f"the {role}'s memory policy has {len(m.hints)} query hints; the limit is {MAX_QUERY_HINTS}")
        out += [text_problem(f"a {role} memory query hint", hint, MAX_QUERY_HINT_CHARS) for hint in m.hints[:MAX_QUERY_HINTS]]
    return [c for c in out if c]


def _options_problem(agent: Agent) -> str | None:
    """Why an agent's model_options cannot be used (an unknown setting, a key written in), or None."""
    try:
        agent.endpoint_options()
    except ModelSettingsError as exc:
        return str(exc)
    return None
