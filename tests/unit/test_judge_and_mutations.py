import json
from dataclasses import replace

import pytest

from engine.budget import Budget
from engine.errors import WorkflowValidationError
from engine.gateway import ModelGateway
from engine.judge import CRITERIA, judge_execution, parse_judgement
from engine.llm import get_litellm
from engine.mutations import Mutation, MutationError, diff, is_empty
from engine.synthesis import team_workflow
from engine.task import load_task
from engine.trace import ListSink, Tracer


@pytest.fixture
def task(examples):
    return load_task(examples / "discontinuous-1d")


@pytest.fixture
def wf(task):
    return team_workflow(task)


def _answer(**over):
    data = {c: {"score": 0.5, "feedback": f"about {c}"} for c in CRITERIA}
    data.update(over)
    return json.dumps(data)


def test_judge_answer_parsing_rejects_what_is_malformed():
    scores, feedback = parse_judgement("Here you go:\n" + _answer())
    assert scores == {c: 0.5 for c in CRITERIA} and feedback["output_quality"] == "about output_quality"
    for bad, why in [("no json at all", "no JSON"), (_answer(output_quality={"score": 1.7, "feedback": "x"}), "[0, 1]"),
                     (_answer(goal_alignment={"score": 0.3}), "no written feedback"),
                     (json.dumps({"goal_alignment": {"score": 1, "feedback": "x"}}), "missing")]:
        with pytest.raises(ValueError, match=why):
            parse_judgement(bad)


@pytest.fixture
def scripted_judge():
    """A provider that answers the judge from a queue, to test retries of malformed answers."""
    from litellm import CustomLLM
    from litellm.types.utils import ModelResponse

    answers: list[str] = []

    class Handler(CustomLLM):
        def completion(self, model, messages, *a, **k):
            return ModelResponse(model=model, choices=[{"index": 0, "message": {"role": "assistant",
                                                                                "content": answers.pop(0)}}])

    litellm = get_litellm()
    litellm.custom_provider_map = [*litellm.custom_provider_map, {"provider": "scripted", "custom_handler": Handler()}]
    yield answers
    litellm.custom_provider_map = [p for p in litellm.custom_provider_map if p["provider"] != "scripted"]


def _gateway(sink):
    return ModelGateway(Budget(), Tracer("t", [sink]), model_override="scripted/judge")


def test_malformed_judge_answer_is_reasked_once_then_scored(task, scripted_judge):
    bad = "I think it is great! " * 200
    scripted_judge += [bad, _answer()]
    sink = ListSink()
    j = judge_execution(task, [], _gateway(sink))
    assert j.ok and j.J == pytest.approx(0.5)
    calls = [e for e in sink.events if e.kind == "model_call"]
    assert len(calls) == 2  # both were paid for
    reask = calls[1].payload["messages"]
    # the re-ask names what was wrong and quotes an excerpt of the bad answer, never all of it
    assert "no JSON object" in reask[-1]["content"] and len(reask[-2]["content"]) < len(bad) / 4
    assert [e.payload.get("used") for e in sink.events if e.kind == "answer_reasked"] == [None, True]


def test_a_judge_that_never_answers_properly_is_a_failed_judgement_not_a_score(task, scripted_judge):
    scripted_judge += ["nope", "{\"broken\": ", "still nothing"]
    sink = ListSink()
    j = judge_execution(task, [], _gateway(sink))
    assert not j.ok and j.J is None
    # one re-ask, bounded: the third scripted answer is never asked for
    assert len([e for e in sink.events if e.kind == "model_call"]) == 2 and scripted_judge == ["still nothing"]
    assert "malformed judge answer (re-asked once)" in j.error and "no JSON object" in j.error


def test_prompt_refinement_makes_a_child_version_with_a_readable_diff(wf):
    m = Mutation("prompt_refinement", "planner", {"prompt": "Look for the jump."}, "quality is low")
    child = m.apply(wf)
    assert child.version == wf.version + 1 and child.parent_hash == wf.hash and child.hash != wf.hash
    d = diff(wf, child)
    assert d["agents_changed"] == {"planner": {"prompt": {"before": "", "after": "Look for the jump."}}}
    assert not is_empty(d) and is_empty(diff(wf, wf))


def test_mutation_roundtrips_as_json(wf):
    m = Mutation("memory_policy_change", "memory", {"record_limit": 5}, "fewer records", author="alice")
    again = Mutation.from_dict(json.loads(json.dumps(m.to_dict())))
    child = again.apply(wf)
    assert again == m and child.harness.memory.role("planner").limit == 5
    # a whole-team field changes every role that retrieves, and only those
    assert {r: m.limit for r, m in child.harness.memory.roles.items() if m.retrieves} == \
        {r: 5 for r, m in wf.harness.memory.roles.items() if m.retrieves}
    assert child.harness.memory.role("verifier") == wf.harness.memory.role("verifier")


def test_agent_addition_and_removal_rewire_the_dag(wf):
    ev = next(e for e in wf.edges if e.artifact == "execution_evidence")
    add = Mutation("agent_addition", "router", {
        "agent": {"id": "router", "roles": ["router"], "inputs": {"execution_evidence": ev.contract},
                  "outputs": {"execution_evidence": ev.contract}},
        "remove_edges": [ev.to_dict()],
        "edges": [{**ev.to_dict(), "target": "router"}, {**ev.to_dict(), "source": "router"}]})
    bigger = add.apply(wf)
    assert "router" in bigger.order() and bigger.order().index("router") < bigger.order().index("finalizer")
    assert diff(wf, bigger)["agents_added"] == ["router"]
    back = Mutation("agent_removal", "router", {"bypass": [ev.to_dict()]}).apply(bigger)
    assert back.hash == wf.hash


def test_invalid_mutations_are_rejected_before_anything_runs(wf):
    with pytest.raises(MutationError, match="unknown mutation kind"):
        Mutation.from_dict({"kind": "teleport"})
    with pytest.raises(MutationError, match="no agent called"):
        Mutation("prompt_refinement", "wizard", {"prompt": "x"}).apply(wf)
    with pytest.raises(MutationError, match="changes nothing"):
        Mutation("memory_policy_change", "memory", {"role": "planner",
                                                    "limit": wf.harness.memory.role("planner").limit}).apply(wf)
    with pytest.raises(WorkflowValidationError, match="unknown record kind"):
        Mutation("memory_policy_change", "memory", {"role": "planner", "retrieves": ["gossip"]}).apply(wf)
    with pytest.raises(MutationError, match="no role"):
        Mutation("memory_policy_change", "memory", {"role": "oracle", "limit": 3}).apply(wf)
    # removing the coder leaves the debugger without code: the DAG rules catch it
    with pytest.raises(WorkflowValidationError, match="needs input 'plan'|needs input 'code'"):
        Mutation("agent_removal", "coder").apply(wf)
    with pytest.raises(WorkflowValidationError, match="unknown type"):
        Mutation("contract_change", "planner->coder:plan", {"contract": "markdwn"}).apply(wf)
    with pytest.raises(WorkflowValidationError, match="form a cycle"):
        Mutation("edge_rewiring", "finalizer", {"add": [
            {"source": "finalizer", "target": "coder", "artifact": "predictions",
             "contract": "csv[id:int, y:float]"}]}).apply(
            replace(wf, agents=tuple(replace(a, inputs={**a.inputs, "predictions": "csv[id:int, y:float]"})
                                     if a.id == "coder" else a for a in wf.agents)))
