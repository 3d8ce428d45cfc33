"""An external agent as a node: the example data profiler is built into its own image on top of
the sandbox image, its self-test gates the build, it runs in Docker through its typed adapter,
and in a run it plays the analyzer, its report reaching the planner through a typed edge. What it
returns is checked against its declared outputs; a broken agent fails its build, not a run."""
import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from engine.budget import Budget
from engine.external import ExternalAgentError, load_agent
from engine.external.adapter import run_agent
from engine.external.build import agent_image, build, executor, is_built
from engine.runner import RunConfig, run_workflow
from engine.synthesis.fixed import team_workflow
from engine.task import load_task
from engine.trace import read_events
from engine.workflow import Attachment

AGENT = Path(__file__).resolve().parents[2] / "external_agents" / "data-profiler"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def profiler(docker_image):
    build(AGENT)
    return load_agent(AGENT)


def test_the_agent_is_built_tested_and_run_through_its_adapter(profiler, examples, tmp_path):
    assert is_built(profiler) and agent_image(profiler).startswith("trellis-agent-data-profiler:")
    task = load_task(examples / "pendulum-extrapolation")
    real = executor(agent_image(profiler), tmp_path)
    handed = {}

    class Watching:  # what the adapter hands the container, read while the run is on
        def run(self, request):
            handed.update(json.loads(Path(request.input_files["trellis_inputs.json"]).read_text()))
            return real.run(request)

    run = run_agent(profiler, {"task": task.description(), "plan": "not declared: not handed over"},
                    task.input_files(), Watching())
    assert run.ok, run.errors
    report = run.produced["report"]
    assert report.startswith("# Data profile (external agent: data-profiler)")
    # the pendulum's test amplitudes lie beyond the training's: the profiler says so, in a table
    assert "## Test values outside the training range" in report and "none:" not in report.split("outside")[-1]
    assert set(handed) == {"task"}  # only what it declares went in
    assert run.result.executor == "docker"


def test_in_a_run_it_plays_the_analyzer_and_hands_the_planner_a_checked_report(profiler, examples, tmp_path):
    task = load_task(examples / "diabetes-progression")
    team = team_workflow(task)
    analyzer = team.agent("analyzer")
    wf = replace(team, agents=tuple(replace(a, attachments=(Attachment(
        "agent", "data-profiler", profiler.artifact().version, profiler.title, "", "", "analyzer"),))
        if a.id == "analyzer" else a for a in team.agents)).validate()
    assert wf.agent("analyzer").roles == analyzer.roles
    result = run_workflow(task, wf, RunConfig(run_dir=tmp_path / "run", budget=Budget(max_tokens=300_000)))
    assert result.status == "completed", result.reason
    events = list(read_events(Path(result.trace_path)))
    ran = [e.payload for e in events if e.kind == "code_execution" and e.agent == "analyzer"]
    assert len(ran) == 1 and ran[0]["purpose"].startswith("external agent data-profiler")
    assert not any(e.kind == "model_call" and e.agent == "analyzer" for e in events)  # no model asked
    assert not any(e.kind == "memory_retrieval" and e.agent == "analyzer" for e in events)  # nor memory given
    handoff = next(e.payload for e in events if e.kind == "handoff" and e.payload["artifact"] == "report")
    assert handoff["ok"] and handoff["contract"] == "markdown" and "Data profile" in str(handoff["value_preview"])


def test_an_agent_that_returns_the_wrong_type_fails_its_step_with_the_contract(profiler, tmp_path, examples):
    bad = tmp_path / "bad-profiler"
    shutil.copytree(AGENT, bad)
    (bad / "profiler.py").write_text((bad / "profiler.py").read_text() +
                                     "\n\ndef numbers(inputs, folder):\n    return {'report': 42}\n")
    spec = json.loads((bad / "agent.json").read_text())
    (bad / "agent.json").write_text(json.dumps({**spec, "name": "bad-profiler", "entry": "profiler:numbers"}))
    agent = load_agent(bad)
    ref = build(bad)
    task = load_task(examples / "diabetes-progression")
    run = run_agent(agent, {"task": task.description()}, task.input_files(), executor(ref, tmp_path / "x"))
    assert not run.ok and "output 'report'" in run.errors[0] and "markdown" in run.errors[0]


def test_a_failing_self_test_fails_the_build_and_leaves_no_image(docker_image, tmp_path):
    broken = tmp_path / "broken-profiler"
    shutil.copytree(AGENT, broken)
    spec = json.loads((broken / "agent.json").read_text())
    (broken / "agent.json").write_text(json.dumps({**spec, "name": "broken-profiler"}))
    (broken / "selftest.py").write_text("raise AssertionError('the profile is wrong')\n")
    with pytest.raises(ExternalAgentError, match="(?s)self-test failed.*the profile is wrong"):
        build(broken)
    assert not is_built(load_agent(broken))
