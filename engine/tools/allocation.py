"""Which agents of a team Trellis builds get which discovered tools: the configuration's
``allocate`` (role -> tools) for each role an agent plays. After that the tool-allocation
mutation (engine/mutations.py) moves them, like any other part of the workflow."""
from __future__ import annotations

from dataclasses import replace

from ..workflow import Workflow
from .registry import ToolRegistry


def allocate(workflow: Workflow, registry: ToolRegistry | None) -> Workflow:
    """``workflow`` with each agent given the discovered tools its roles are allocated; the
    same workflow when there is nothing to add."""
    if registry is None or not registry.specs:
        return workflow
    agents = []
    for agent in workflow.agents:
        extra = [t for role in agent.roles for t in registry.for_role(role) if t not in agent.tools]
        agents.append(replace(agent, tools=agent.tools + tuple(dict.fromkeys(extra))) if extra else agent)
    agents = tuple(agents)
    return workflow if agents == workflow.agents else replace(workflow, agents=agents)


def available_only(workflow: Workflow, registry: ToolRegistry) -> Workflow:
    """``workflow`` without the MCP tools ``registry`` cannot give (an archived team's tools from
    servers this run does not have), so that it still validates here."""
    agents = tuple(replace(a, tools=tuple(t for t in a.tools if registry.problem(t) is None)) for a in workflow.agents)
    return workflow if agents == workflow.agents else replace(workflow, agents=agents)
