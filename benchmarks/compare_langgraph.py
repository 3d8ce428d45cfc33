"""Orchestration per node, Trellis beside LangGraph, on the same DAG in the same run.

The DAG is benchmarks/engine_overhead.py's (the team's chain, then layers of routers fanning out
and back in, then the finalizer), at 1000 agents. Four figures per node:

- Trellis, the offline model (the in-process scripted scientist answers every router: it reads
  the prompt, so it is a cheap model, not a free one), sandboxed code and evaluate.py excluded;
- Trellis's engine alone (the model's time excluded too): scheduling, typed handoff checks,
  prompts, tracing to disk;
- LangGraph: a StateGraph of the same nodes and edges whose node functions do nothing but return
  their output, invoked once (what LangGraph itself costs per node);
- Trellis's workflow exported and walked by LangGraph (engine/synthesis/export.py), engine alone.

    python benchmarks/compare_langgraph.py [--agents 1000]
"""
import argparse
import operator
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated, TypedDict

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("TRELLIS_MCP_CONFIG", "none")

from engine.budget import Budget  # noqa: E402
from engine.runner import RunConfig, run_workflow  # noqa: E402
from figures import record  # noqa: E402 - benchmarks/figures.py, beside this script
from engine.task import load_task  # noqa: E402
from engine_overhead import wide_workflow  # noqa: E402


class State(TypedDict, total=False):
    steps: Annotated[list, operator.add]


def langgraph_per_node(workflow) -> float:
    from langgraph.graph import END, START, StateGraph

    graph = StateGraph(State)
    for agent in workflow.agents:
        graph.add_node(agent.id, lambda state, name=agent.id: {"steps": [name]})
    incoming = {a.id: 0 for a in workflow.agents}
    for e in {(e.source, e.target) for e in workflow.edges}:
        graph.add_edge(*e)
        incoming[e[1]] += 1
    for a, n in incoming.items():
        if n == 0:
            graph.add_edge(START, a)
    outgoing = {e.source for e in workflow.edges}
    for a in incoming:
        if a not in outgoing:
            graph.add_edge(a, END)
    app = graph.compile()
    app.invoke({"steps": []}, {"recursion_limit": 10 * len(workflow.agents)})  # warm
    started = time.perf_counter()
    out = app.invoke({"steps": []}, {"recursion_limit": 10 * len(workflow.agents)})
    seconds = time.perf_counter() - started
    assert len(set(out["steps"])) == len(workflow.agents)
    return seconds / len(workflow.agents) * 1000


def trellis(task, workflow, driver=None) -> tuple[float, float]:
    run_dir = Path(tempfile.mkdtemp(prefix="trellis-compare-")) / "run"
    started = time.perf_counter()
    result = run_workflow(task, workflow, RunConfig(run_dir=run_dir, budget=Budget(max_tokens=10 ** 8),
                                                    driver=driver))
    wall = time.perf_counter() - started
    assert result.status == "completed", result.reason
    n = len(workflow.agents)
    with_model = (wall - result.execution_seconds - result.evaluation_seconds) / n * 1000
    return with_model, result.overhead_seconds / n * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=1000)
    args = parser.parse_args()
    task = load_task(ROOT / "examples" / "discontinuous-1d")
    workflow = wide_workflow(task, args.agents).validate()
    trellis(task, wide_workflow(task, 10).validate())  # imports and first-call costs out of the way
    with_model, engine = trellis(task, workflow)
    lg = langgraph_per_node(workflow)
    from engine.synthesis.export import to_langgraph
    from engine.synthesis.langgraph_runtime import drive

    import types

    module = types.ModuleType("trellis_exported")  # LangGraph reads the state's type hints from its module
    sys.modules[module.__name__] = module
    exec(compile(to_langgraph(workflow), "exported", "exec"), module.__dict__)  # noqa: S102 - our own export
    namespace = module.__dict__
    _, exported = trellis(task, workflow, drive(namespace["build"]))
    record(f"engine per node, {args.agents} agents, offline model", with_model, "ms", 1.0)
    record(f"engine per node, {args.agents} agents, engine alone", engine, "ms", lg, peer="LangGraph")
    print(f"| per node, {args.agents} agents | ms | goal |\n|---|---|---|")
    print(f"| Trellis, offline model (code and evaluate.py excluded) | {with_model:.2f} | < 1 |")
    print(f"| Trellis engine alone (model excluded) | {engine:.2f} | below LangGraph |")
    print(f"| LangGraph, node functions that only return | {lg:.2f} | - |")
    print(f"| Trellis engine alone, walked by LangGraph (exported) | {exported:.2f} | - |")


if __name__ == "__main__":
    main()
