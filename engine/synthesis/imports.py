"""Workflows from files: Trellis's own JSON, or a graph from another system imported as a
structural prior, then grounded in this task's roles and types (grounding.py) and given the
library's skills like any synthesized workflow.

- An AFlow workflow: its ``graph.py`` (a ``Workflow`` class whose ``__init__`` makes operators,
  ``self.custom = operator.Custom(self.llm)``, and whose ``__call__`` awaits them in order) is
  read as a syntax tree, never run: each awaited call site is a node, a loop around calls is a
  loop back. Or the same as JSON: ``{"format": "aflow", "operators": [{"id", "operator",
  "instruction"}], "edges": [[a, b]], "loops": [[a, b]]}``.
- A LangGraph graph: a Python file defining a ``StateGraph`` (``graph.py`` or ``graph.py:name``),
  introspected through langgraph's own API (``compile().get_graph()``). Loading it runs the
  file, so that happens in the sandbox, as generated code does; only the nodes, their
  docstrings and the edges come back.
"""
from __future__ import annotations

import ast
import json
import tempfile
from pathlib import Path

from .. import python_ast
from ..errors import TrellisError, WorkflowValidationError
from ..protocol.events import SynthesisStage
from ..sandbox import ExecutionLimits, ExecutionRequest
from ..sandbox.subprocess_executor import SubprocessExecutor
from ..task import Task
from ..workflow import Workflow
from .grounding import PriorNode, StructuralPrior, ground

MAX_FILE_BYTES = 2_000_000
LANGGRAPH_TIMEOUT_S = 60


def read_text(path: Path) -> str:
    if path.is_symlink():  # a link could point at any file the engine may read; its lines would show in errors
        raise TrellisError(f"{path}: a symbolic link; give the workflow file itself")
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise TrellisError(f"{path}: {path.stat().st_size:,} bytes; a workflow file is at most {MAX_FILE_BYTES:,}")
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TrellisError(f"{path}: not a readable workflow file ({exc})") from exc


def load_workflow_file(path: Path, task: Task, *, tracer=None) -> tuple[Workflow, str]:
    """The workflow in ``path`` and a sentence saying what it was read as."""
    workflow, said, _ = open_workflow_file(path, task, tracer=tracer)
    return workflow, said


def open_workflow_file(path: Path, task: Task, *, tracer=None) -> tuple[Workflow, str, bool]:
    """``load_workflow_file``, and whether the file was a graph from elsewhere, grounded here (a
    structural prior, which synthesis then gives the library's skills)."""
    spec, name = str(path), ""
    if ".py:" in spec:  # a LangGraph file and the name of its graph, as langgraph.json writes it
        spec, name = spec.rsplit(":", 1)
    path = Path(spec)
    if path.suffix == ".py":
        text = read_text(path)  # also refuses a link, before the sandbox is handed a copy of what it points at
        if _looks_like_aflow(text):
            prior = aflow_prior_from_source(text, str(path))
        else:
            prior = langgraph_prior(path, name or None)
        return (*grounded(prior, task, path, tracer), True)
    text = read_text(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TrellisError(f"{path}: not a workflow file: JSON ({exc.msg} at line {exc.lineno}) or Python (an AFlow "
                           "graph.py or a LangGraph graph)") from exc
    if isinstance(data, dict) and data.get("format") == "aflow":
        return (*grounded(aflow_prior_from_json(data, str(path)), task, path, tracer), True)
    if isinstance(data, dict) and isinstance(data.get("agents"), list):
        return Workflow.from_dict(data).validate(), f"the Trellis workflow in {path}", False
    raise WorkflowValidationError([f"{path}: not a Trellis workflow (an object with an \"agents\" list) nor an "
                                   "AFlow graph ({\"format\": \"aflow\", \"operators\": [...]})"])


def grounded(prior: StructuralPrior, task: Task, path: Path, tracer=None) -> tuple[Workflow, str]:
    workflow, notes = ground(prior, task)
    if tracer is not None:
        tracer.emit(SynthesisStage(stage="plan", inputs={"imported": prior.to_dict(), "file": str(path)},
                                   outputs={"workflow": workflow.to_dict(), "grounding": notes},
                                   note=f"a {prior.source} graph of {len(prior.nodes)} node(s) grounded in "
                                        f"{len(workflow.agents)} agent(s)"), "synthesis")
    return workflow, f"the {prior.source} graph in {path}, grounded: " + "; ".join(notes)


# --- AFlow ---------------------------------------------------------------------------------------
def _looks_like_aflow(text: str) -> bool:
    return "operator." in text and "class Workflow" in text


def aflow_prior_from_json(data: dict, where: str) -> StructuralPrior:
    ops = data.get("operators")
    if not isinstance(ops, list) or not ops:
        raise WorkflowValidationError([f"{where}: an AFlow graph lists its operators: \"operators\": "
                                       "[{\"id\", \"operator\", \"instruction\"}]"])
    nodes = []
    for i, op in enumerate(ops):
        if not isinstance(op, dict) or not isinstance(op.get("operator"), str):
            raise WorkflowValidationError([f"{where}: operator {i + 1} is not {{\"id\", \"operator\", \"instruction\"}}"])
        nodes.append(PriorNode(str(op.get("id") or f"{op['operator'].lower()}_{i + 1}"), op["operator"],
                               str(op.get("instruction", ""))[:2000]))
    ids = {n.id for n in nodes}

    def pairs(key: str) -> list[tuple[str, str]]:
        out = []
        for item in data.get(key) or []:
            if not (isinstance(item, (list, tuple)) and len(item) == 2 and all(x in ids for x in item)):
                raise WorkflowValidationError([f"{where}: {key} entry {item!r} is not [from, to] between operators"])
            out.append((item[0], item[1]))
        return out

    edges = pairs("edges") or [(a.id, b.id) for a, b in zip(nodes, nodes[1:])]
    return StructuralPrior("aflow", nodes, edges, pairs("loops"))


def aflow_prior_from_source(text: str, where: str) -> StructuralPrior:
    """AFlow's graph.py read as a syntax tree (never executed): operators made in ``__init__``,
    their awaited calls in ``__call__`` in source order, loops around calls."""
    try:
        tree = python_ast.parse(text)
    except SyntaxError as exc:
        raise WorkflowValidationError([f"{where}: does not parse as Python ({exc.msg}, line {exc.lineno})"]) from exc
    cls = next((n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "Workflow"), None)
    if cls is None:
        raise WorkflowValidationError([f"{where}: no `class Workflow` (AFlow's graph.py defines one)"])
    methods = {f.name: f for f in cls.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}
    operators: dict[str, str] = {}
    for node in ast.walk(methods.get("__init__", cls)):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            target = node.targets[0]
            func = node.value.func
            if isinstance(target, ast.Attribute) and isinstance(func, ast.Attribute) and \
                    isinstance(func.value, ast.Name) and func.value.id == "operator":
                operators[target.attr] = func.attr
    call = methods.get("__call__") or methods.get("run")
    if not operators or call is None:
        raise WorkflowValidationError([f"{where}: no operators made in __init__ (self.x = operator.X(...)) or no "
                                       "__call__ that awaits them"])
    nodes: list[PriorNode] = []
    loops: list[tuple[str, str]] = []

    def visit(stmts: list[ast.stmt]) -> None:
        for stmt in stmts:
            if isinstance(stmt, (ast.For, ast.AsyncFor, ast.While)):
                first = len(nodes)
                visit(stmt.body)
                if len(nodes) > first:
                    loops.append((nodes[-1].id, nodes[first].id))
                visit(stmt.orelse)
                continue
            if isinstance(stmt, ast.If):
                visit(stmt.body)
                visit(stmt.orelse)
                continue
            for sub in ast.walk(stmt):
                if isinstance(sub, ast.Await) and isinstance(sub.value, ast.Call):
                    f = sub.value.func
                    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self" \
                            and f.attr in operators:
                        instruction = next((ast.unparse(k.value) for k in sub.value.keywords
                                            if k.arg in ("instruction", "prompt")), "")
                        n = sum(1 for x in nodes if x.label == operators[f.attr]) + 1
                        nodes.append(PriorNode(f"{f.attr}_{n}" if n > 1 else f.attr, operators[f.attr],
                                               instruction[:500]))

    visit(call.body)
    if not nodes:
        raise WorkflowValidationError([f"{where}: __call__ awaits none of its operators"])
    return StructuralPrior("aflow", nodes, [(a.id, b.id) for a, b in zip(nodes, nodes[1:])], loops)


# --- LangGraph -----------------------------------------------------------------------------------
_INTROSPECT = r'''
import importlib.util, inspect, json, socket, sys
# urllib3 (imported by langgraph's dependencies) opens an IPv6 socket at import to probe for
# IPv6 unless told there is none; the sandbox refuses every socket, so it is told.
socket.has_ipv6 = False
spec = importlib.util.spec_from_file_location("imported_graph", "graph_module.py")
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
name = sys.argv[1] if len(sys.argv) > 1 else ""
def graphish(x):
    return hasattr(x, "get_graph") or (hasattr(x, "compile") and hasattr(x, "add_node"))
obj = getattr(module, name) if name else getattr(module, "graph", None)
if obj is None or not graphish(obj):
    found = [v for k, v in sorted(vars(module).items()) if not k.startswith("_") and graphish(v)]
    obj = found[0] if found else None
if obj is None:
    print(json.dumps({"error": "the file defines no StateGraph (or compiled graph)"})); sys.exit(0)
if not hasattr(obj, "get_graph"):
    obj = obj.compile()
g = obj.get_graph()
def doc(data):
    target = getattr(data, "func", None) or getattr(data, "afunc", None) or data
    try:
        return (inspect.getdoc(target) or "")[:500]
    except Exception:
        return ""
print(json.dumps({"nodes": [{"id": str(n.id), "name": str(n.name), "doc": doc(n.data)} for n in g.nodes.values()],
                  "edges": [{"source": str(e.source), "target": str(e.target), "conditional": bool(e.conditional)}
                            for e in g.edges]}))
'''


def langgraph_prior(path: Path, name: str | None = None, executor=None) -> StructuralPrior:
    """The graph a LangGraph file defines, introspected in the sandbox through langgraph's API."""

    executor = executor or SubprocessExecutor(root=tempfile.mkdtemp(prefix="trellis-import-"), keep=False)
    result = executor.run(ExecutionRequest(code=_INTROSPECT, input_files={"graph_module.py": path},
                                           args=(name or "",),
                                           limits=ExecutionLimits(wall_seconds=LANGGRAPH_TIMEOUT_S,
                                                                                  cpu_seconds=LANGGRAPH_TIMEOUT_S)))
    lines = [ln for ln in (result.stdout or "").splitlines() if ln.startswith("{")]
    if result.status != "ok" or not lines:
        tail = (result.stderr or result.stdout or "").strip().splitlines()[-3:]
        raise WorkflowValidationError([f"{path}: the LangGraph file could not be loaded in the sandbox "
                                       f"({result.status}): {' | '.join(tail)[:600]}"])
    data = json.loads(lines[-1])
    if data.get("error"):
        raise WorkflowValidationError([f"{path}: {data['error']}"])
    return langgraph_prior_from_graph(data, str(path))


def langgraph_prior_from_graph(data: dict, where: str) -> StructuralPrior:
    """A LangGraph drawable graph (nodes and edges of ``get_graph()``) as a structural prior:
    the start and end markers left out, an edge back to a node already reached is a loop."""
    markers = {"__start__", "__end__"}
    nodes = [PriorNode(n["id"], n.get("name", ""), n.get("doc", "")) for n in data["nodes"] if n["id"] not in markers]
    if not nodes:
        raise WorkflowValidationError([f"{where}: the graph has no node besides its start and end"])
    edges = [(e["source"], e["target"]) for e in data["edges"]]
    reached: list[str] = []
    frontier = ["__start__"]
    while frontier:  # breadth first from the start: the order the graph runs in
        nxt = []
        for src in frontier:
            for a, b in edges:
                if a == src and b not in reached and b not in markers and b not in nxt:
                    nxt.append(b)
        reached += nxt
        frontier = nxt
    reached += [n.id for n in nodes if n.id not in reached]
    rank = {n: i for i, n in enumerate(reached)}
    forward = [(a, b) for a, b in edges if a in rank and b in rank and rank[b] > rank[a]]
    back = [(a, b) for a, b in edges if a in rank and b in rank and rank[b] <= rank[a]]
    by_id = {n.id: n for n in nodes}
    return StructuralPrior("langgraph", [by_id[i] for i in reached], forward, back)
