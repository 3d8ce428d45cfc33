"""A workflow file from elsewhere is hostile input: an AFlow graph.py is read, never run; a
LangGraph file runs only in the sandbox (no host writes, no processes, no network); a link is
refused before anything reads through it; an oversized or malformed graph is refused with the
reason; an external agent's folder holding a link is refused."""
import json
import os
import shutil
from pathlib import Path

import pytest

from engine.errors import TrellisError, WorkflowValidationError
from engine.external import ExternalAgentError, load_agent
from engine.synthesis.grounding import PriorNode, StructuralPrior, ground
from engine.synthesis.imports import load_workflow_file
from engine.task import load_task

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def task(examples):
    return load_task(examples / "diabetes-progression")


def test_an_aflow_graph_py_is_never_executed(task, tmp_path):
    marker = tmp_path / "pwned"
    graph = tmp_path / "graph.py"
    graph.write_text(f"import os\nos.system('touch {marker}')\nopen({str(marker)!r}, 'w').write('x')\n"
                     "class Workflow:\n    def __init__(self, llm):\n        self.custom = operator.Custom(llm)\n"
                     f"        open({str(marker)!r}, 'w')\n"
                     "    async def __call__(self, problem):\n        return await self.custom(input=problem)\n")
    wf, _ = load_workflow_file(graph, task)
    assert wf.problems() == [] and not marker.exists()


@pytest.mark.slow
def test_a_langgraph_file_runs_confined_in_the_sandbox(task, tmp_path):
    marker = tmp_path / "pwned"
    graph = tmp_path / "hostile.py"
    graph.write_text(f"from pathlib import Path\nPath({str(marker)!r}).write_text('x')\n")
    with pytest.raises(WorkflowValidationError, match="could not be loaded in the sandbox"):
        load_workflow_file(graph, task)
    assert not marker.exists()
    forking = tmp_path / "forking.py"
    forking.write_text("import os\nos.fork()\n")
    with pytest.raises(WorkflowValidationError, match="sandbox"):
        load_workflow_file(forking, task)
    calling = tmp_path / "calling.py"
    calling.write_text("import socket\nsocket.create_connection(('127.0.0.1', 22))\n")
    with pytest.raises(WorkflowValidationError, match="sandbox"):
        load_workflow_file(calling, task)


def test_a_workflow_file_given_as_a_link_is_refused_before_it_is_read(task, tmp_path):
    secret = tmp_path / "secret.py"
    secret.write_text("API_KEY = 'sk-do-not-show'\n")
    for name in ("graph.py", "workflow.json"):
        link = tmp_path / name
        link.symlink_to(secret)
        with pytest.raises(TrellisError, match="symbolic link") as err:
            load_workflow_file(link, task)
        assert "sk-do-not-show" not in str(err.value)


def test_an_oversized_or_empty_prior_is_refused(task):
    huge = StructuralPrior("aflow", [PriorNode(f"n{i}", "Custom") for i in range(500)])
    with pytest.raises(WorkflowValidationError, match="at most 60 are grounded"):
        ground(huge, task)
    with pytest.raises(WorkflowValidationError, match="no nodes"):
        ground(StructuralPrior("langgraph", []), task)


def test_node_names_from_elsewhere_become_safe_unique_agent_ids(task):
    prior = StructuralPrior("langgraph", [PriorNode("../../etc/passwd", description="write code"),
                                          PriorNode("../../etc/passwd!", description="run tests"),
                                          PriorNode("x" * 500, description="write the final report")],
                            edges=[("../../etc/passwd", "../../etc/passwd!"), ("../../etc/passwd!", "x" * 500)])
    wf, _ = ground(prior, task)
    assert wf.problems() == []
    ids = [a.id for a in wf.agents]
    assert len(ids) == len(set(ids)) and all("/" not in i and len(i) <= 40 for i in ids)


def test_an_external_agent_folder_with_a_link_is_refused(tmp_path):
    folder = tmp_path / "agent"
    shutil.copytree(ROOT / "external_agents" / "data-profiler", folder)
    (folder / "secrets.txt").symlink_to("/etc/hostname")
    with pytest.raises(ExternalAgentError, match="symbolic link"):
        load_agent(folder)
    os.remove(folder / "secrets.txt")
    spec = json.loads((folder / "agent.json").read_text())
    (folder / "agent.json").write_text(json.dumps({**spec, "entry": "os:system"}))
    with pytest.raises(ExternalAgentError, match="which the folder does not have"):
        load_agent(folder)
