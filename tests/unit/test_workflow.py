import json
from dataclasses import replace

import pytest

from engine.errors import WorkflowValidationError
from engine.harness import Harness, MemoryPolicy
from engine.synthesis import WORKFLOWS, team_workflow
from engine.task import load_task
from engine.workflow import Agent, Edge, Route, Workflow


@pytest.fixture
def task(examples):
    return load_task(examples / "discontinuous-1d")


@pytest.fixture
def wf(task):
    return team_workflow(task)


def problems(wf: Workflow) -> str:
    with pytest.raises(WorkflowValidationError) as info:
        wf.validate()
    return "\n".join(info.value.problems)


def test_starting_workflows_are_valid(task):
    for build in WORKFLOWS.values():
        assert build(task).problems() == []


def test_cycle_is_rejected_with_the_agents_named(wf):
    cyclic = replace(wf, edges=wf.edges + (Edge("finalizer", "planner", "final_report", "markdown"),))
    cyclic = replace(cyclic, agents=tuple(
        replace(a, inputs={**a.inputs, "final_report": "markdown"}) if a.id == "planner" else a for a in wf.agents))
    text = problems(cyclic)
    assert "form a cycle" in text and "planner" in text and "finalizer" in text


def test_dangling_edge(wf):
    text = problems(replace(wf, edges=wf.edges + (Edge("coder", "reviewer", "code", "python"),)))
    assert "'reviewer', which does not exist (dangling edge)" in text


def test_input_that_no_upstream_agent_produces(wf):
    edges = tuple(e for e in wf.edges if not (e.target == "planner"))
    text = problems(replace(wf, edges=edges))
    assert "agent 'planner' needs input 'report' but no upstream agent produces it" in text


def test_contract_type_mismatch_is_explained(wf):
    edges = tuple(replace(e, contract="csv[id:int, y:float]") if e.artifact == "plan" else e for e in wf.edges)
    text = problems(replace(wf, edges=edges))
    assert "produces 'plan' as markdown, which does not satisfy the edge contract csv[id:int, y:float]" in text


def test_edge_contract_that_does_not_parse(wf):
    edges = tuple(replace(e, contract="{exit_code:integer}") if e.artifact == "execution_evidence" else e
                  for e in wf.edges)
    assert "unknown type 'integer'" in problems(replace(wf, edges=edges))


def test_route_must_go_upstream_and_be_capped(wf):
    bad = replace(wf, routes=(Route("coder", "RETRY", "finalizer", 3), Route("verifier", "RETRY", "debugger", 99)))
    text = problems(bad)
    assert "'finalizer' is not upstream of 'coder'" in text
    assert "loop cap must be between 1 and 10" in text


def test_agent_without_the_tool_its_role_needs(wf):
    agents = tuple(replace(a, tools=()) if a.id == "verifier" else a for a in wf.agents)
    assert "lacks the tool 'sandbox.python'" in problems(replace(wf, agents=agents))


def test_all_problems_are_reported_at_once(wf):
    bad = replace(wf, edges=wf.edges + (Edge("ghost", "coder", "plan", "markdown"),),
                  agents=wf.agents + (Agent("x", ("wizard",)),))
    err_text = problems(bad)
    assert "dangling" in err_text and "unknown role 'wizard'" in err_text


def test_hash_is_stable_and_ignores_version_and_order(wf):
    same = Workflow.from_json(wf.to_json())
    assert same.hash == wf.hash
    shuffled = replace(wf, agents=tuple(reversed(wf.agents)), edges=tuple(reversed(wf.edges)), version=7, note="x")
    assert shuffled.hash == wf.hash
    child = wf.derive("sharper planner", agents=tuple(
        replace(a, prompt="Look for discontinuities.") if a.id == "planner" else a for a in wf.agents))
    assert child.hash != wf.hash and child.version == wf.version + 1 and child.parent_hash == wf.hash


def test_harness_parts_are_in_the_hash(wf):
    memory = replace(wf, harness=replace(wf.harness, memory=wf.harness.memory.with_role("planner", limit=5)))
    procedure = replace(wf, harness=Harness(procedures={**wf.harness.procedures, "coder": "Write tests first."}))
    assert len({wf.hash, memory.hash, procedure.hash}) == 3


def test_json_roundtrip_and_tamper_detection(wf):
    data = json.loads(wf.to_json())
    assert Workflow.from_dict(data) == wf
    data["agents"][0]["prompt"] = "edited by hand"
    with pytest.raises(WorkflowValidationError, match="hashes to"):
        Workflow.from_dict(data)
    with pytest.raises(WorkflowValidationError, match="does not parse"):
        Workflow.from_json("{not json")
