"""A Trellis workflow exported: as its JSON (what ``--start FILE`` and the studio read back), and
as a runnable LangGraph program (one node per agent, in run order; each route a conditional edge
back, with its loop cap kept by Trellis). The program's nodes run the Trellis agents themselves
(engine/synthesis/langgraph_runtime.py): models, sandbox, contracts and checks as in any run, with
LangGraph walking the graph.

    python -m engine workflow export var/runs/<run>/final_workflow.json --to langgraph -o team_graph.py
    python team_graph.py examples/diabetes-progression
"""
from __future__ import annotations

import pprint
from pathlib import Path

from ..errors import WorkflowValidationError
from ..workflow import Workflow

TRELLIS_ROOT = Path(__file__).resolve().parents[2]


def to_json(workflow: Workflow) -> str:
    return workflow.to_json() + "\n"


def to_langgraph(workflow: Workflow) -> str:
    """Python source of a module that builds ``workflow`` as a LangGraph StateGraph and runs it."""
    workflow.validate()
    reserved = sorted({a.id for a in workflow.agents} & {"__start__", "__end__"})
    if reserved:
        raise WorkflowValidationError([f"agent {reserved[0]!r} is named like LangGraph's own start or end node; "
                                       "rename it to export the workflow"])
    order = workflow.order()
    lines = [
        f'"""The Trellis workflow {workflow.name!r} (version {workflow.version}, {workflow.hash[:12]}) as a LangGraph graph.',
        "",
        "One node per Trellis agent, in the order Trellis runs them; each route is a conditional edge back to",
        "where the work is repaired (Trellis keeps the loop cap). The nodes run the Trellis agents: their",
        "models, the sandbox, the typed handoffs and the checks, as in any Trellis run.",
        "",
        "    python this_file.py TASK_FOLDER [--runs-dir DIR] [--seed N]",
        '"""',
        "import operator",
        "import sys",
        "from typing import Annotated, TypedDict",
        "",
        "from langgraph.graph import END, START, StateGraph",
        "",
        f"WORKFLOW = {pprint.pformat(workflow.to_dict(), width=110, sort_dicts=True)}",
        "",
        "",
        "class State(TypedDict, total=False):",
        "    steps: Annotated[list, operator.add]   # each agent's step: its status and where the work went",
        "",
        "",
        "def build(team):",
        '    """The graph; ``team`` runs one Trellis agent per node (engine.synthesis.langgraph_runtime.Team)."""',
        "    graph = StateGraph(State)",
    ]
    for agent_id in order:
        lines.append(f"    graph.add_node({agent_id!r}, team.node({agent_id!r}))")
    lines.append(f"    graph.add_edge(START, {order[0]!r})")
    for i, agent_id in enumerate(order):
        nxt = order[i + 1] if i + 1 < len(order) else None
        targets = sorted({r.target for r in workflow.routes if r.source == agent_id})
        after = repr(nxt) if nxt else "END"
        if targets:
            ends = ", ".join([*(repr(t) for t in targets), after])
            lines.append(f"    graph.add_conditional_edges({agent_id!r}, team.route({agent_id!r}, {after}), [{ends}])")
        else:
            lines.append(f"    graph.add_edge({agent_id!r}, {after})")
    lines += [
        "    return graph.compile()",
        "",
        "",
        'if __name__ == "__main__":',
        "    try:",
        "        from engine.synthesis.langgraph_runtime import main",
        "    except ImportError:  # run from outside the Trellis folder it was exported from",
        f"        sys.path.insert(0, {str(TRELLIS_ROOT)!r})",
        "        from engine.synthesis.langgraph_runtime import main",
        "",
        "    sys.exit(main(sys.argv[1:], WORKFLOW, build))",
        "",
    ]
    source = "\n".join(lines)
    compile(source, "<exported>", "exec")  # a generated module that does not compile is a bug here
    return source
