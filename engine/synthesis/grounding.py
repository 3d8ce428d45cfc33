"""Grounding a structural prior: a graph found elsewhere (an AFlow operator graph, a LangGraph
StateGraph) is a shape, not a Trellis workflow. Grounding gives each node the role its name and
description say it plays, keeps the graph's order, adds a role the prior lacks where a role after
it needs what only that role makes (a planner needs a report: an analyzer goes before it), types
every edge with this task's contracts, and turns the prior's loops back into capped RETRY routes
where the looping node reports a status. Every decision is written down in ``notes``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import networkx as nx

from ..errors import WorkflowValidationError
from ..harness import ROLE_GIVES, ROLE_NEEDS, ROLES, Harness
from ..task import Task
from ..workflow import Agent, Edge, Route, Workflow
from .fixed import team_workflow

# Words in a node's name or description that say which role it plays, most telling first.
ROLE_WORDS: tuple[tuple[str, str], ...] = (
    ("debugger", r"debug|fix|repair|revis|correct|patch"),
    ("verifier", r"verif|test|check|review|validat|execut|run_code|critic|evaluat"),
    ("finalizer", r"final|report|answer|format|ensemble|select|summar|deliver|output"),
    ("router", r"route|router|decid|dispatch|branch"),
    ("coder", r"code|program|implement|engineer|script|writ"),
    ("planner", r"plan|design|strateg|propos|approach|generat|think|reason"),
    ("analyzer", r"analy|explor|profil|inspect|data|eda|understand|read"),
)
# AFlow's operators (MetaGPT's aflow operator.py) by what they do; Custom says it in its instruction.
AFLOW_OPERATORS = {"AnswerGenerate": "planner", "Generate": "planner", "CustomCodeGenerate": "coder",
                   "Programmer": "coder", "Test": "verifier", "Review": "verifier", "Revise": "debugger",
                   "ScEnsemble": "finalizer", "MdEnsemble": "finalizer", "Format": "finalizer"}
CANONICAL = ("analyzer", "planner", "coder", "debugger", "verifier", "finalizer")
STATUS_ROLES = frozenset({"verifier", "router"})   # roles whose answer is a route status
MAX_NODES = 60


@dataclass
class PriorNode:
    id: str
    label: str = ""          # an operator or function name
    description: str = ""    # an instruction, a docstring


@dataclass
class StructuralPrior:
    source: str                                  # "aflow", "langgraph"
    nodes: list[PriorNode]
    edges: list[tuple[str, str]] = field(default_factory=list)      # forward edges
    loops: list[tuple[str, str]] = field(default_factory=list)      # (from, back to)

    def to_dict(self) -> dict:
        return {"source": self.source, "nodes": [n.__dict__ for n in self.nodes],
                "edges": [list(e) for e in self.edges], "loops": [list(e) for e in self.loops]}


def role_of(node: PriorNode) -> tuple[str, str]:
    """The role a node plays and why (the words that said so): its name first, then what its
    description says (a report's docstring may mention validation without being a verifier)."""
    if node.label in AFLOW_OPERATORS:
        return AFLOW_OPERATORS[node.label], f"AFlow's {node.label} operator"
    for text, where in ((f"{node.id} {node.label}", "its name"), (node.description, "its description")):
        for role, words in ROLE_WORDS:
            hit = re.search(words, text.lower())
            if hit:
                return role, f"{where} says {hit.group(0)!r}"
    return "planner", "nothing in it names a role; read as reasoning (planner)"


def _agent_id(raw: str, taken: set[str]) -> str:
    base = re.sub(r"[^A-Za-z0-9_-]+", "_", raw).strip("_")[:40] or "node"
    name, n = base, 2
    while name in taken:
        name, n = f"{base}_{n}", n + 1
    taken.add(name)
    return name


def ground(prior: StructuralPrior, task: Task) -> tuple[Workflow, list[str]]:
    """The Trellis workflow ``prior`` grounds to on ``task``, and what grounding decided."""
    if not prior.nodes:
        raise WorkflowValidationError([f"the imported {prior.source} graph has no nodes"])
    if len(prior.nodes) > MAX_NODES:
        raise WorkflowValidationError([f"the imported {prior.source} graph has {len(prior.nodes)} nodes; "
                                       f"at most {MAX_NODES} are grounded"])
    notes: list[str] = []
    order = _order(prior)
    team = team_workflow(task, Harness())
    types = {name: t for a in team.agents for name, t in a.outputs.items()}
    taken: set[str] = set()
    chain: list[tuple[str, str, str]] = []   # (agent id, role, prior node id)
    ids: dict[str, str] = {}
    for node in order:
        role, why = role_of(node)
        if chain and chain[-1][1] == role:
            notes.append(f"{node.id!r} ({role}) follows another {role}: one agent plays both")
            ids[node.id] = chain[-1][0]
            continue
        agent_id = _agent_id(node.id, taken)
        ids[node.id] = agent_id
        chain.append((agent_id, role, node.id))
        notes.append(f"{node.id!r} -> {role} ({why})")
    chain = _complete(chain, taken, notes)
    agents, edges = [], []
    made: dict[str, str] = {}  # artifact -> the latest agent that made it
    descriptions = {n.id: n.description for n in prior.nodes}
    for agent_id, role, node_id in chain:
        needs = ROLE_NEEDS[role]
        inputs = {n: types[n] for n in needs}
        for n in needs:
            edges.append(Edge(made[n], agent_id, n, types[n]))
        outputs = {n: types[n] for n in ROLE_GIVES[role]}
        if role == "router":
            outputs = {}
        tools = ("sandbox.python",) if role in ("analyzer", "verifier") else ()
        prompt = (f"Imported from a {prior.source} graph, node {node_id!r}: {descriptions.get(node_id, '')}".strip()
                  if node_id else "")
        agents.append(Agent(agent_id, (role,), inputs=inputs, outputs=outputs, tools=tools, prompt=prompt[:2000]))
        for n in ROLE_GIVES[role]:
            made[n] = agent_id
    # the finalizer hands on the code that ran, as the team's does
    final = next((a for a in agents if a.roles == ("finalizer",)), None)
    if final is not None and "code" in made:
        agents = [Agent(a.id, a.roles, {**a.inputs, "code": "python"}, a.outputs, a.tools, prompt=a.prompt)
                  if a is final else a for a in agents]
        edges.append(Edge(made["code"], final.id, "code", "python"))
    routes = _routes(prior, ids, {a.id: a.roles[0] for a in agents}, chain, notes)
    name = f"{task.name}-imported-{prior.source}"
    workflow = Workflow(name, tuple(agents), tuple(dict.fromkeys(edges)), tuple(routes), Harness(),
                        note=f"grounded from a {prior.source} graph: " + "; ".join(notes)[:1500])
    return workflow.validate(), notes


def _order(prior: StructuralPrior) -> list[PriorNode]:
    g = nx.DiGraph()
    position = {n.id: i for i, n in enumerate(prior.nodes)}
    g.add_nodes_from(position)
    g.add_edges_from((a, b) for a, b in prior.edges if a in position and b in position)
    try:
        ids = list(nx.lexicographical_topological_sort(g, key=lambda n: position[n]))
    except nx.NetworkXUnfeasible:
        ids = [n.id for n in prior.nodes]  # a cycle in the forward edges: keep the declared order
    by_id = {n.id: n for n in prior.nodes}
    return [by_id[i] for i in ids]


def _complete(chain: list[tuple[str, str, str]], taken: set[str], notes: list[str]) -> list[tuple[str, str, str]]:
    """Insert the roles the chain lacks, before the first role that needs what they make, and a
    verifier and a finalizer at the end when none delivers the answer."""
    out: list[tuple[str, str, str]] = []
    have: set[str] = set()
    for item in chain:
        for needed in _missing(item[1], have):
            agent_id = _agent_id(needed, taken)
            out.append((agent_id, needed, ""))
            have |= set(ROLE_GIVES[needed])
            notes.append(f"added {needed} before {item[0]!r} (a {item[1]} works from "
                         f"{' and '.join(ROLE_NEEDS[item[1]])}, which the roles before it must make)")
        out.append(item)
        have |= set(ROLE_GIVES[item[1]])
    for role in ("verifier", "finalizer"):
        if not any(r == role for _, r, _ in out):
            for needed in _missing(role, have):
                agent_id = _agent_id(needed, taken)
                out.append((agent_id, needed, ""))
                have |= set(ROLE_GIVES[needed])
                notes.append(f"added {needed}: the {role} works from what it makes")
            out.append((_agent_id(role, taken), role, ""))
            have |= set(ROLE_GIVES[role])
            notes.append(f"added {role}: the imported graph has none, and a Trellis team must "
                         + ("run its program" if role == "verifier" else "hand on a checked answer"))
    return out


def _missing(role: str, have: set[str]) -> list[str]:
    """The canonical roles to add, in order, so that ``role`` has everything it needs."""
    out: list[str] = []
    avail = set(have)
    for need in ROLE_NEEDS[role]:
        if need in avail:
            continue
        maker = next(r for r in CANONICAL if need in ROLE_GIVES[r])
        for before in _missing(maker, avail):
            out.append(before)
            avail |= set(ROLE_GIVES[before])
        out.append(maker)
        avail |= set(ROLE_GIVES[maker])
    return list(dict.fromkeys(out))


def _routes(prior: StructuralPrior, ids: dict[str, str], roles: dict[str, str],
            chain: list[tuple[str, str, str]], notes: list[str]) -> list[Route]:
    position = {agent_id: i for i, (agent_id, _, _) in enumerate(chain)}
    out: dict[tuple[str, str], Route] = {}
    for a, b in prior.loops:
        src, dst = ids.get(a), ids.get(b)
        if src is None or dst is None:
            continue
        if roles[src] not in STATUS_ROLES:
            notes.append(f"the loop {a!r} -> {b!r} dropped: {src!r} ({roles[src]}) reports no status to loop on")
            continue
        if position[dst] > position[src]:
            notes.append(f"the loop {a!r} -> {b!r} dropped: it does not go back")
            continue
        out.setdefault((src, "RETRY"), Route(src, "RETRY", dst, max_loops=3))
        notes.append(f"the loop {a!r} -> {b!r} became the route {src} --RETRY--> {dst}, at most 3 times")
    if not out:  # a team that can repair its program: the verifier sends a failed run back
        verifier = next((i for i, r, _ in chain if r == "verifier"), None)
        fixer = next((i for i, r, _ in chain if r == "debugger"), None) or \
            next((i for i, r, _ in chain if r == "coder"), None)
        if verifier and fixer and position[fixer] < position[verifier]:
            out[(verifier, "RETRY")] = Route(verifier, "RETRY", fixer, max_loops=3)
            notes.append(f"added the route {verifier} --RETRY--> {fixer} (at most 3 times), so a failed run is repaired")
    return list(out.values())


__all__ = ["PriorNode", "ROLES", "StructuralPrior", "ground", "role_of"]
