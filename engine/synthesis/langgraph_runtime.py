"""What an exported LangGraph program (engine/synthesis/export.py) runs on: a Trellis run whose
agents are LangGraph nodes. ``run_workflow`` sets the run up as always (trace, budget, sandbox,
memory, evaluation); LangGraph walks the graph, and each node is one ``step`` of the run's
scheduler: the agent plays its roles, its handoffs are checked, its route is followed."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Callable

from ..budget import Budget
from ..runner import RunConfig, Stopped, run_workflow
from ..task import load_task
from ..workflow import Workflow

def step_cap(workflow: Workflow) -> int:
    """LangGraph's step cap for ``workflow``: every agent once, and again on every loop its routes
    allow (a route sends the work back over at most every agent); the routes' caps stop loops first."""
    loops = sum(r.max_loops for r in workflow.routes)
    return len(workflow.agents) * (1 + loops) + 10


class Team:
    """The nodes and conditional edges of an exported graph, bound to one run's scheduler."""

    def __init__(self, scheduler):
        self.scheduler = scheduler

    def node(self, agent_id: str) -> Callable[[dict], dict]:
        def run_agent(state: dict) -> dict:
            jump = self.scheduler.step(agent_id)
            return {"steps": [{"agent": agent_id, "status": self.scheduler.statuses[agent_id], "jump": jump}]}
        run_agent.__name__ = f"trellis_{agent_id}"
        run_agent.__doc__ = f"Trellis agent {agent_id!r}: {', '.join(self.scheduler.wf.agent(agent_id).roles)}"
        return run_agent

    def route(self, agent_id: str, otherwise: str) -> Callable[[dict], str]:
        def where(state: dict) -> str:
            last = state["steps"][-1]
            return last["jump"] if last["agent"] == agent_id and last["jump"] else otherwise
        return where


def drive(build: Callable) -> Callable:
    """A run driver (RunConfig.driver) that builds the graph with ``build`` and invokes it."""
    def run(scheduler) -> tuple:
        graph = build(Team(scheduler))
        try:
            graph.invoke({"steps": []}, {"recursion_limit": step_cap(scheduler.wf)})
        except Stopped as stop:
            return "stopped", stop.reason, scheduler.statuses, scheduler.outputs
        return scheduler.finished()
    return run


def main(argv: list[str], workflow: dict, build: Callable) -> int:
    parser = argparse.ArgumentParser(description="Run this exported Trellis workflow under LangGraph on a task.")
    parser.add_argument("task", help="a task folder, e.g. examples/diabetes-progression")
    parser.add_argument("--runs-dir", default="var/runs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-tokens", type=int, default=200_000)
    args = parser.parse_args(argv)
    task = load_task(args.task)
    wf = Workflow.from_dict(workflow).validate()
    run_dir = Path(args.runs_dir) / (time.strftime("%Y%m%d-%H%M%S") + f"-{task.name}-langgraph")
    result = run_workflow(task, wf, RunConfig(run_dir=run_dir, seed=args.seed, budget=Budget(max_tokens=args.max_tokens),
                                              driver=drive(build)))
    metric = result.metric or {}
    score = f"{metric.get('metric')} = {metric.get('value'):.6g}" if metric.get("ok") else metric.get("error", "no score")
    print(f"{result.status}: {score}; agents {', '.join(f'{a}={s}' for a, s in result.agent_status.items())}; "
          f"trace {result.trace_path}")
    return 0 if result.status == "completed" else 1


if __name__ == "__main__":  # pragma: no cover - the exported module calls main itself
    sys.exit(2)
