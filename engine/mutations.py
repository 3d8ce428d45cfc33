"""Mutations: first-class, serializable proposals to change a workflow, each with a diff.

A mutation is data (kind, target, params, rationale, author) so that it can be stored,
shown to a person for approval, vetoed, and replayed. Applying it yields a new workflow
version whose parent is the old one; the result is validated before anything runs it.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace

from .errors import WorkflowValidationError
from .harness import ROLES, Harness, MemoryPolicy
from .workflow import Agent, Attachment, Edge, Route, Workflow

KINDS = ("prompt_refinement", "procedure_refinement", "agent_addition", "agent_removal", "edge_rewiring",
         "contract_change", "route_change", "memory_policy_change", "tool_allocation", "attachment_change")


class MutationError(ValueError):
    """The mutation cannot be applied as written (bad kind, unknown target, malformed params)."""


@dataclass(frozen=True)
class Mutation:
    kind: str
    target: str
    params: dict = field(default_factory=dict)
    rationale: str = ""
    author: str = "engine"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Mutation":
        if not isinstance(d, dict):
            raise MutationError("a mutation must be a JSON object")
        if d.get("kind") not in KINDS:
            raise MutationError(f"unknown mutation kind {d.get('kind')!r}; kinds are {', '.join(KINDS)}")
        params = d.get("params", {})
        if not isinstance(params, dict):
            raise MutationError("mutation params must be an object")
        return cls(kind=d["kind"], target=str(d.get("target", "")), params=params,
                   rationale=str(d.get("rationale", "")), author=str(d.get("author", "engine")))

    def describe(self) -> str:
        return f"{self.kind} on {self.target}: {self.rationale}".strip()

    def apply(self, wf: Workflow) -> Workflow:
        """The mutated workflow, validated; raises MutationError or WorkflowValidationError."""
        try:
            child = _APPLY[self.kind](wf, self)
        except (KeyError, TypeError) as exc:
            raise MutationError(f"{self.kind} on {self.target!r} is malformed: {exc!r}") from exc
        child = replace(child, version=wf.version + 1, parent_hash=wf.hash, note=self.describe())
        if child.hash == wf.hash:
            raise MutationError(f"{self.kind} on {self.target!r} changes nothing")
        return child.validate()


def _agent_changed(wf: Workflow, agent_id: str, **changes) -> Workflow:
    if agent_id not in {a.id for a in wf.agents}:
        raise MutationError(f"no agent called {agent_id!r}")
    return replace(wf, agents=tuple(replace(a, **changes) if a.id == agent_id else a for a in wf.agents))


def _prompt(wf: Workflow, m: Mutation) -> Workflow:
    return _agent_changed(wf, m.target, prompt=str(m.params["prompt"]))


def _procedure(wf: Workflow, m: Mutation) -> Workflow:
    if m.target not in wf.harness.procedures:
        raise MutationError(f"no procedure for role {m.target!r}")
    procedures = {**wf.harness.procedures, m.target: str(m.params["procedure"])}
    return replace(wf, harness=replace(wf.harness, procedures=procedures))


def _edges(items: list) -> tuple[Edge, ...]:
    return tuple(Edge(e["source"], e["target"], e["artifact"], e["contract"]) for e in items)


def _routes(items: list) -> tuple[Route, ...]:
    return tuple(Route(r["source"], r["on"], r["target"], int(r.get("max_loops", 3))) for r in items)


def _remove_edges(edges: tuple[Edge, ...], spec: list) -> tuple[Edge, ...]:
    drop = {(e["source"], e["target"], e["artifact"]) for e in spec}
    return tuple(e for e in edges if (e.source, e.target, e.artifact) not in drop)


def _add_agent(wf: Workflow, m: Mutation) -> Workflow:
    agent = Agent.from_dict(m.params["agent"])
    if agent.id in {a.id for a in wf.agents}:
        raise MutationError(f"an agent called {agent.id!r} already exists")
    edges = _remove_edges(wf.edges, m.params.get("remove_edges", [])) + _edges(m.params.get("edges", []))
    return replace(wf, agents=wf.agents + (agent,), edges=edges,
                   routes=wf.routes + _routes(m.params.get("routes", [])))


def _remove_agent(wf: Workflow, m: Mutation) -> Workflow:
    if m.target not in {a.id for a in wf.agents}:
        raise MutationError(f"no agent called {m.target!r}")
    edges = tuple(e for e in wf.edges if m.target not in (e.source, e.target)) + _edges(m.params.get("bypass", []))
    routes = tuple(r for r in wf.routes if m.target not in (r.source, r.target)) + _routes(m.params.get("routes", []))
    return replace(wf, agents=tuple(a for a in wf.agents if a.id != m.target), edges=edges, routes=routes)


def _rewire(wf: Workflow, m: Mutation) -> Workflow:
    return replace(wf, edges=_remove_edges(wf.edges, m.params.get("remove", [])) + _edges(m.params.get("add", [])))


def _contract(wf: Workflow, m: Mutation) -> Workflow:
    """Change the contract of one edge (target "source->target:artifact") and, so that the
    ends still agree, the matching output and input declarations."""
    source, rest = m.target.split("->", 1)
    target, artifact = rest.split(":", 1)
    contract = str(m.params["contract"])
    if not any((e.source, e.target, e.artifact) == (source, target, artifact) for e in wf.edges):
        raise MutationError(f"no edge {m.target!r}")
    edges = tuple(replace(e, contract=contract) if (e.source, e.target, e.artifact) == (source, target, artifact)
                  else e for e in wf.edges)
    wf = replace(wf, edges=edges)
    if m.params.get("update_ends", True):
        src, dst = wf.agent(source), wf.agent(target)
        wf = _agent_changed(wf, source, outputs={**src.outputs, artifact: contract})
        wf = _agent_changed(wf, target, inputs={**dst.inputs, artifact: contract})
    return wf


def _route(wf: Workflow, m: Mutation) -> Workflow:
    """Add, change or (with params.remove) drop the route of one agent on one status."""
    on = m.params["on"]
    routes = tuple(r for r in wf.routes if not (r.source == m.target and r.on == on))
    if not m.params.get("remove"):
        routes += (Route(m.target, on, m.params["target"], int(m.params.get("max_loops", 3))),)
    return replace(wf, routes=routes)


# Whole-team memory fields (the policy's shape before per-role policies); each applies to
# every role that retrieves, so editors and people can still say "retrieve 5 records".
_TEAM_MEMORY_FIELDS = {"record_limit": "limit", "query_hints": "hints", "retrieval_filters": "retrieves"}


def _memory(wf: Workflow, m: Mutation) -> Workflow:
    """Change one role's memory policy (params.role and any of records, retrieves, hints, limit,
    subscribes), every retrieving role's (record_limit, query_hints, retrieval_filters), or the
    whole policy (params.roles). Stored records are out of reach: this edits the policy only."""
    params = dict(m.params)
    policy = wf.harness.memory
    try:
        if "roles" in params:
            if set(params) != {"roles"}:
                raise MutationError("params.roles replaces the whole policy; give it alone")
            policy = MemoryPolicy.from_dict({"roles": params["roles"]})
        elif "role" in params:
            role = params.pop("role")
            if role not in ROLES:
                raise MutationError(f"no role {str(role)[:40]!r}; roles are {', '.join(ROLES)}")
            if not params:
                raise MutationError(f"the change names role {role!r} but no field to change")
            policy = policy.with_role(role, **params)
        else:
            unknown = set(params) - set(_TEAM_MEMORY_FIELDS)
            if unknown or not params:
                raise MutationError(f"unknown memory-policy field(s) {', '.join(sorted(map(str, unknown))) or '(none)'}; "
                                    "give params.role with any of records, retrieves, hints, limit, subscribes, "
                                    f"or any of {', '.join(_TEAM_MEMORY_FIELDS)} for every retrieving role")
            for role, rm in policy.roles.items():
                if rm.retrieves or "retrieval_filters" in params:
                    policy = policy.with_role(role, **{_TEAM_MEMORY_FIELDS[k]: v for k, v in params.items()})
    except ValueError as exc:
        if isinstance(exc, MutationError):
            raise
        raise MutationError(str(exc)) from exc
    return replace(wf, harness=Harness(wf.harness.procedures, wf.harness.coordination, policy))


def _tools(wf: Workflow, m: Mutation) -> Workflow:
    """Give an agent a tool (params.add) or take one away (params.remove); the workflow rules then
    check the tool against the run's discovered tools (engine/tools/registry.py)."""
    unknown = set(m.params) - {"add", "remove"}
    if unknown or len(m.params) != 1:
        raise MutationError("tool_allocation takes params {\"add\": <tool>} or {\"remove\": <tool>}")
    (action, tool), = m.params.items()
    if not isinstance(tool, str) or not tool:
        raise MutationError(f"tool_allocation {action}: name one tool, e.g. mcp.science.fit_curve")
    agent = next((a for a in wf.agents if a.id == m.target), None)
    if agent is None:
        raise MutationError(f"no agent called {m.target!r}")
    if action == "add":
        if tool in agent.tools:
            raise MutationError(f"agent {m.target!r} already has {tool!r}")
        return _agent_changed(wf, m.target, tools=agent.tools + (tool,))
    if tool not in agent.tools:
        raise MutationError(f"agent {m.target!r} has no tool {tool!r}; it has {', '.join(agent.tools) or 'none'}")
    return _agent_changed(wf, m.target, tools=tuple(t for t in agent.tools if t != tool))


def _attachments(wf: Workflow, m: Mutation) -> Workflow:
    """Attach a library artifact to an agent (params.add: the attachment as JSON), take one off
    (params.remove: its name), or both at once (a skill swapped for another)."""
    unknown = set(m.params) - {"add", "remove"}
    if unknown or not m.params:
        raise MutationError('attachment_change takes params {"add": {kind, name, version, title, text, '
                            'interface, role}} and/or {"remove": <name>}')
    agent = next((a for a in wf.agents if a.id == m.target), None)
    if agent is None:
        raise MutationError(f"no agent called {m.target!r}")
    attachments, tools = list(agent.attachments), list(agent.tools)
    if "remove" in m.params:
        name = str(m.params["remove"]).split("@")[0].split(":")[-1]
        gone = [x for x in attachments if x.name == name]
        if not gone:
            raise MutationError(f"agent {m.target!r} has no attachment {name!r}; it has "
                                f"{', '.join(x.name for x in attachments) or 'none'}")
        attachments = [x for x in attachments if x.name != name]
        tools = [t for t in tools if not any(x.kind == "tool" and x.name == t for x in gone)]
    if "add" in m.params:
        if not isinstance(m.params["add"], dict):
            raise MutationError("attachment_change add: give the attachment as a JSON object")
        new = Attachment.from_dict(m.params["add"])
        if any(x.name == new.name and x.kind == new.kind for x in attachments):
            raise MutationError(f"agent {m.target!r} already has {new.kind} {new.name!r}")
        attachments.append(new)
        if new.kind == "tool" and new.name not in tools:
            tools.append(new.name)
    return _agent_changed(wf, m.target, attachments=tuple(attachments), tools=tuple(tools))


_APPLY = {"prompt_refinement": _prompt, "procedure_refinement": _procedure, "agent_addition": _add_agent,
          "agent_removal": _remove_agent, "edge_rewiring": _rewire, "contract_change": _contract,
          "route_change": _route, "memory_policy_change": _memory, "tool_allocation": _tools,
          "attachment_change": _attachments}


def diff(parent: Workflow, child: Workflow) -> dict:
    """A structured diff a person can read: what was added, removed and changed."""
    pa, ca = {a.id: a.to_dict() for a in parent.agents}, {a.id: a.to_dict() for a in child.agents}
    changed_agents = {}
    for aid in sorted(set(pa) & set(ca)):
        fields = {k: {"before": pa[aid][k], "after": ca[aid][k]} for k in pa[aid] if pa[aid][k] != ca[aid][k]}
        if fields:
            changed_agents[aid] = fields
    pe = {json.dumps(e.to_dict(), sort_keys=True) for e in parent.edges}
    ce = {json.dumps(e.to_dict(), sort_keys=True) for e in child.edges}
    pr = {json.dumps(r.to_dict(), sort_keys=True) for r in parent.routes}
    cr = {json.dumps(r.to_dict(), sort_keys=True) for r in child.routes}
    ph, ch = parent.harness.to_dict(), child.harness.to_dict()
    procedures = {role: {"before": ph["procedures"].get(role), "after": ch["procedures"].get(role)}
                  for role in sorted(set(ph["procedures"]) | set(ch["procedures"]))
                  if ph["procedures"].get(role) != ch["procedures"].get(role)}
    tools = [{"agent": aid, "added": sorted(set(ca[aid]["tools"]) - set(pa[aid]["tools"])),
              "removed": sorted(set(pa[aid]["tools"]) - set(ca[aid]["tools"]))}
             for aid in sorted(changed_agents) if "tools" in changed_agents[aid]]
    attachments = []
    for aid in sorted(changed_agents):
        if "attachments" in changed_agents[aid]:
            before = {f"{x['kind']}:{x['name']}": x for x in pa[aid].get("attachments", [])}
            after = {f"{x['kind']}:{x['name']}": x for x in ca[aid].get("attachments", [])}
            attachments.append({"agent": aid,
                                "added": [f"{k} ({after[k].get('title', '')})" for k in sorted(set(after) - set(before))],
                                "removed": [f"{k} ({before[k].get('title', '')})" for k in sorted(set(before) - set(after))]})
    return {
        "from": {"version": parent.version, "hash": parent.hash}, "to": {"version": child.version, "hash": child.hash},
        "agents_added": sorted(set(ca) - set(pa)), "agents_removed": sorted(set(pa) - set(ca)),
        "agents_changed": changed_agents,
        "edges_added": [json.loads(x) for x in sorted(ce - pe)], "edges_removed": [json.loads(x) for x in sorted(pe - ce)],
        "routes_added": [json.loads(x) for x in sorted(cr - pr)], "routes_removed": [json.loads(x) for x in sorted(pr - cr)],
        "procedures_changed": procedures,
        "coordination_changed": ph["coordination"] != ch["coordination"],
        "memory_changed": _memory_diff(ph["memory"]["roles"], ch["memory"]["roles"]),
        "tools_changed": tools,  # also in agents_changed; said per tool here: "removes X from planner"
        "attachments_changed": attachments,  # also in agents_changed; said per artifact: "attaches skill:x to planner"
    }


def _memory_diff(before: dict, after: dict) -> dict:
    """Per role and field, what a memory-policy change changed: {"planner.limit": {before, after}}."""
    out = {}
    for role in sorted(set(before) | set(after)):
        b, a = before.get(role, {}), after.get(role, {})
        for k in sorted(set(b) | set(a)):
            if b.get(k) != a.get(k):
                out[f"{role}.{k}"] = {"before": b.get(k), "after": a.get(k)}
    return out


def is_empty(d: dict) -> bool:
    return not any(d[k] for k in d if k not in {"from", "to"})


def tool_lines(d: dict) -> list[str]:
    """A diff's tool changes in words: "adds mcp.science.plot to analyzer"."""
    return [f"{verb} {tool} {prep} {change['agent']}" for change in d.get("tools_changed", [])
            for verb, prep, key in (("adds", "to", "added"), ("removes", "from", "removed")) for tool in change[key]]


__all__ = ["KINDS", "Mutation", "MutationError", "WorkflowValidationError", "diff", "is_empty", "tool_lines"]
