"""Starting workflows for a task: the full team, an adapter that groups roles into a worker
and a reviewer, and a single-agent baseline that plays every role alone."""
from __future__ import annotations

from ..harness import Harness
from ..task import Task
from ..workflow import Agent, Edge, Route, Workflow

EVIDENCE = "{exit_code:int, stdout_tail:str, files:{path: sha256}}"


def team_workflow(task: Task, harness: Harness | None = None) -> Workflow:
    preds = task.resources.prediction_contract()
    agents = (
        Agent("analyzer", ("analyzer",), outputs={"report": "markdown"}, tools=("sandbox.python",)),
        Agent("planner", ("planner",), inputs={"report": "markdown"}, outputs={"plan": "markdown"}),
        Agent("coder", ("coder",), inputs={"plan": "markdown"}, outputs={"code": "python"}),
        Agent("debugger", ("debugger",), inputs={"code": "python"}, outputs={"code": "python"}),
        Agent("verifier", ("verifier",), inputs={"code": "python"},
              outputs={"execution_evidence": EVIDENCE, "predictions": preds}, tools=("sandbox.python",)),
        Agent("finalizer", ("finalizer",), inputs={"execution_evidence": EVIDENCE, "predictions": preds, "code": "python"},
              outputs={"predictions": preds, "final_report": "markdown"}),
    )
    edges = (
        Edge("analyzer", "planner", "report", "markdown"),
        Edge("planner", "coder", "plan", "markdown"),
        Edge("coder", "debugger", "code", "python"),
        Edge("debugger", "verifier", "code", "python"),
        Edge("verifier", "finalizer", "execution_evidence", EVIDENCE),
        Edge("verifier", "finalizer", "predictions", preds),
        Edge("debugger", "finalizer", "code", "python"),
    )
    routes = (Route("verifier", "RETRY", "debugger", max_loops=3),)
    return Workflow(f"{task.name}-team", agents, edges, routes, harness or Harness()).validate()


def worker_reviewer_workflow(task: Task, harness: Harness | None = None) -> Workflow:
    """The adapter of the issue: seven roles grouped into two agents."""
    preds = task.resources.prediction_contract()
    agents = (
        Agent("worker", ("analyzer", "planner", "coder"), outputs={"code": "python"}, tools=("sandbox.python",)),
        Agent("reviewer", ("debugger", "verifier", "finalizer"), inputs={"code": "python"},
              outputs={"predictions": preds, "final_report": "markdown"}, tools=("sandbox.python",)),
    )
    edges = (Edge("worker", "reviewer", "code", "python"),)
    routes = (Route("reviewer", "RETRY", "reviewer", max_loops=3),)
    return Workflow(f"{task.name}-worker-reviewer", agents, edges, routes, harness or Harness()).validate()


def single_agent_workflow(task: Task, harness: Harness | None = None) -> Workflow:
    """Mimosa's baseline: one agent plays every role, on the same budget as the team."""
    preds = task.resources.prediction_contract()
    agent = Agent("solo", ("analyzer", "planner", "coder", "debugger", "verifier", "finalizer"),
                  outputs={"predictions": preds, "final_report": "markdown"}, tools=("sandbox.python",))
    return Workflow(f"{task.name}-single-agent", (agent,), (), (Route("solo", "RETRY", "solo", 3),),
                    harness or Harness()).validate()


WORKFLOWS = {"team": team_workflow, "worker-reviewer": worker_reviewer_workflow, "single": single_agent_workflow}
