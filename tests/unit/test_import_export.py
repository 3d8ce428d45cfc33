"""Workflows from elsewhere and back: an AFlow graph (its graph.py read as a syntax tree, or its
JSON) and a LangGraph StateGraph (introspected through langgraph's API, in the sandbox) are
grounded in a task and run; a Trellis workflow exported as a LangGraph program runs under
LangGraph, following its routes."""
import importlib.util
import json
from pathlib import Path

import pytest

from engine.budget import Budget
from engine.errors import WorkflowValidationError
from engine.library.store import load_library
from engine.runner import RunConfig, run_workflow
from engine.synthesis.export import to_langgraph
from engine.synthesis.fixed import team_workflow
from engine.synthesis.imports import aflow_prior_from_json, load_workflow_file
from engine.synthesis.langgraph_runtime import drive
from engine.task import load_task
from engine.synthesis.start import choose_start
from engine.trace import ListSink, Tracer, read_events
from tests.fakes import FakeExecutor, Outcome, fail_first, traceback_of
from tests.unit.test_library import WordsEmbedder

IMPORTED = Path(__file__).resolve().parents[2] / "imported_workflows"


@pytest.fixture
def diabetes(examples):
    return load_task(examples / "diabetes-progression")


def roles(wf):
    return [(a.id, a.roles[0]) for a in wf.agents]


def test_an_aflow_graph_py_is_read_without_running_it_and_grounded(diabetes, tmp_path):
    wf, said = load_workflow_file(IMPORTED / "aflow_graph.py", diabetes)
    # its operators in the order __call__ awaits them; the planner the coder needs is added
    assert roles(wf) == [("custom", "analyzer"), ("planner", "planner"), ("programmer", "coder"),
                         ("test", "verifier"), ("sc_ensemble", "finalizer")]
    # the loop around Programmer and Test became a capped repair route
    assert [(r.source, r.on, r.target, r.max_loops) for r in wf.routes] == [("test", "RETRY", "programmer", 3)]
    assert "added planner before 'programmer'" in said and wf.problems() == []
    # typed with this task's contract
    assert wf.agent("test").outputs["predictions"] == diabetes.resources.prediction_contract()
    # never executed: a graph.py whose import would fail (metagpt is not installed) still reads
    assert "metagpt" in (IMPORTED / "aflow_graph.py").read_text()


def test_an_aflow_json_graph_and_its_mistakes(diabetes, tmp_path):
    good = {"format": "aflow", "operators": [
        {"id": "gen", "operator": "AnswerGenerate", "instruction": "propose an approach"},
        {"id": "prog", "operator": "Programmer"}, {"id": "rev", "operator": "Review"},
        {"id": "fix", "operator": "Revise"}, {"id": "fmt", "operator": "Format"}],
        "loops": [["rev", "prog"]]}
    path = tmp_path / "aflow.json"
    path.write_text(json.dumps(good))
    wf, _ = load_workflow_file(path, diabetes)
    assert [r for _, r in roles(wf)] == ["analyzer", "planner", "coder", "verifier", "debugger", "finalizer"]
    assert [(r.source, r.target) for r in wf.routes] == [("rev", "prog")]
    with pytest.raises(WorkflowValidationError, match="loops entry"):
        aflow_prior_from_json({**good, "loops": [["rev", "nowhere"]]}, "x.json")
    with pytest.raises(WorkflowValidationError, match="lists its operators"):
        aflow_prior_from_json({"format": "aflow", "operators": []}, "x.json")
    broken = tmp_path / "graph.py"
    broken.write_text("import x.operator as operator\nclass Workflow:\n    def __init__(self:\n"
                      "        self.custom = operator.Custom(self.llm)\n")
    with pytest.raises(WorkflowValidationError, match="does not parse"):
        load_workflow_file(broken, diabetes)


@pytest.mark.slow
def test_a_langgraph_graph_is_introspected_in_the_sandbox_and_grounded(diabetes):
    wf, said = load_workflow_file(Path(f"{IMPORTED / 'langgraph_team.py'}:graph"), diabetes)
    assert roles(wf) == [("explore_data", "analyzer"), ("choose_method", "planner"), ("write_code", "coder"),
                         ("run_tests", "verifier"), ("write_report", "finalizer")]
    # the conditional edge back from run_tests to write_code is the repair route
    assert [(r.source, r.target) for r in wf.routes] == [("run_tests", "write_code")]
    assert "'choose_method' -> planner (its description says 'approach')" in said


@pytest.mark.slow
@pytest.mark.parametrize("graph", ["aflow_graph.py", "langgraph_team.py"])
def test_an_imported_graph_runs_grounded_and_given_the_librarys_skills(diabetes, tmp_path, graph):
    sink = ListSink()
    wf, info = choose_start(diabetes, str(IMPORTED / graph), tracer=Tracer("start", [sink]),
                            library=load_library(tmp_path / "library"), embedder=WordsEmbedder())
    assert info["path"] == "file" and "grounded" in info["reason"]
    assert wf.name.endswith("-synthesized") and "-imported-" in wf.name
    assert any(a.attachments for a in wf.agents)
    stages = [e.payload["stage"] for e in sink.events if e.kind == "synthesis_stage"]
    assert stages[0] == "plan" and "synthesize" in stages
    result = run_workflow(diabetes, wf, RunConfig(run_dir=tmp_path / "run", budget=Budget(max_tokens=500_000)),
                          executor=FakeExecutor(tmp_path / "sandbox"))
    assert result.status == "completed" and result.metric["ok"]


def _load(source: str, tmp_path: Path):
    path = tmp_path / "exported.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("exported", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_an_exported_graph_runs_under_langgraph_and_follows_its_routes(diabetes, tmp_path):
    wf = team_workflow(diabetes)
    module = _load(to_langgraph(wf), tmp_path)
    assert module.WORKFLOW["hash"] == wf.hash
    graph = module.build(_NoTeam())
    drawn = graph.get_graph()
    assert {n for n in drawn.nodes} - {"__start__", "__end__"} == {a.id for a in wf.agents}
    assert ("verifier", "debugger") in {(e.source, e.target) for e in drawn.edges if e.conditional}
    # the first program crashes: the verifier sends it back to the debugger, under LangGraph
    crash = Outcome("error", stderr=traceback_of("NameError: name 'modle' is not defined"))
    executor = FakeExecutor(tmp_path / "sandbox", script=fail_first("predictions", crash))
    result = run_workflow(diabetes, wf, RunConfig(run_dir=tmp_path / "run", budget=Budget(max_tokens=500_000),
                                                  driver=drive(module.build)), executor=executor)
    assert result.status == "completed" and result.metric["ok"]
    events = list(read_events(Path(result.trace_path)))
    started = [e.agent for e in events if e.kind == "agent_started"]
    assert started.count("debugger") == 2 and started.count("verifier") == 2
    assert any(e.kind == "route" and e.payload["taken"] for e in events)


def test_the_same_workflow_under_langgraph_and_under_trellis_scores_the_same(diabetes, tmp_path):
    wf = team_workflow(diabetes)
    module = _load(to_langgraph(wf), tmp_path)
    ours = run_workflow(diabetes, wf, RunConfig(run_dir=tmp_path / "a", seed=2), executor=FakeExecutor(tmp_path / "s1"))
    theirs = run_workflow(diabetes, wf, RunConfig(run_dir=tmp_path / "b", seed=2, driver=drive(module.build)),
                          executor=FakeExecutor(tmp_path / "s2"))
    assert ours.metric["value"] == theirs.metric["value"] and ours.agent_status == theirs.agent_status


class _NoTeam:
    def node(self, agent_id):
        return lambda state: {"steps": []}

    def route(self, agent_id, otherwise):
        return lambda state: otherwise


def test_an_agent_named_like_langgraphs_own_nodes_is_refused_for_export(diabetes):
    from dataclasses import replace

    wf = team_workflow(diabetes)
    renamed = replace(wf, agents=tuple(replace(a, id="__end__") if a.id == "finalizer" else a for a in wf.agents),
                      edges=tuple(replace(e, target="__end__") if e.target == "finalizer" else e for e in wf.edges))
    with pytest.raises(WorkflowValidationError, match="LangGraph's own start or end node"):
        to_langgraph(renamed)


def test_an_exported_workflow_of_hundreds_of_agents_runs_under_langgraph(diabetes, tmp_path):
    """LangGraph's own step cap (its recursion limit) is set from the workflow, not a constant."""
    import sys as _sys

    _sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from engine_overhead import wide_workflow

    wf = wide_workflow(load_task(Path(__file__).resolve().parents[2] / "examples" / "discontinuous-1d"), 600)
    module = _load(to_langgraph(wf), tmp_path)
    task = load_task(Path(__file__).resolve().parents[2] / "examples" / "discontinuous-1d")
    result = run_workflow(task, wf, RunConfig(run_dir=tmp_path / "run", budget=Budget(max_tokens=5_000_000),
                                              driver=drive(module.build)), executor=FakeExecutor(tmp_path / "s"))
    assert result.status == "completed" and len(result.agent_status) == 600
