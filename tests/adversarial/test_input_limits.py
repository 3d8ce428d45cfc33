"""Issue 9.4: limits on every input. Before them a 1 MB role procedure was accepted and adopted
(a 126k-token prompt), a 20-digit seed gave a 500 page, `memory_mb: "lots"` loaded and then
every program failed silently, and a 2**40-token budget was accepted. Now the engine's own
validation refuses oversize text and out-of-range numbers with a message naming the field, and
the studio shows those messages as form errors (4xx), never a 500 and never a new version."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.test import Client

from engine.budget import Budget
from engine.errors import TaskSpecError, WorkflowValidationError
from engine.limits import MAX_AGENTS, MAX_PROCEDURE_CHARS, MAX_TOKENS
from engine.mutations import Mutation as EngineMutation
from engine.synthesis import team_workflow
from engine.task import load_task
from engine.workflow import Agent, Workflow
from tests.studio_harness import proposed_mutation, running_run
from webapp.runs.models import MutationStatus, Run

ROOT = Path(__file__).resolve().parents[2]
ONE_MB = "Think step by step. " * 52_429  # ~1 MB of plausible text


@pytest.fixture
def workflow(examples) -> Workflow:
    return team_workflow(load_task(examples / "diabetes-progression"))


# --- the engine ---------------------------------------------------------------------------

def test_a_one_megabyte_procedure_is_refused_by_the_engine(workflow):
    with pytest.raises(WorkflowValidationError) as err:
        EngineMutation("procedure_refinement", "coder", {"procedure": ONE_MB}).apply(workflow)
    assert err.value.problems == [f"the coder procedure is {len(ONE_MB):,} characters long; "
                                  f"the limit is {MAX_PROCEDURE_CHARS:,}"]


def test_an_oversize_agent_prompt_in_workflow_json_does_not_validate(workflow):
    data = workflow.to_dict()
    data["agents"][0]["prompt"] = ONE_MB
    wf = Workflow.from_dict({**data, "hash": None})
    assert any("prompt is" in p and "the limit is 16,000" in p for p in wf.problems())


@pytest.mark.parametrize("contract, says", [
    ("csv[" + ", ".join(f"column_{i}:float" for i in range(300)) + "]", "characters long; the limit is 2,000"),
    ("{a:" * 200 + "int" + "}" * 200, "nests 200 levels deep; the limit is 16"),
])
def test_a_contract_too_long_or_too_deep_is_refused(workflow, contract, says):
    with pytest.raises(WorkflowValidationError) as err:
        EngineMutation("contract_change", "coder->debugger:code", {"contract": contract}).apply(workflow)
    assert any(says in p for p in err.value.problems), err.value.problems


def test_a_workflow_with_too_many_agents_is_refused(workflow):
    extra = tuple(Agent(f"router-{i}", ("router",)) for i in range(MAX_AGENTS))
    wf = Workflow("huge", workflow.agents + extra, workflow.edges, workflow.routes, workflow.harness)
    assert wf.problems() == [f"the workflow has {len(wf.agents):,} agents; the limit is {MAX_AGENTS:,}"]


def _task_with_limits(examples, tmp_path, limits) -> Path:
    folder = tmp_path / "task"
    shutil.copytree(examples / "discontinuous-1d", folder)
    cfg = json.loads((folder / "Data_config.json").read_text())
    cfg["limits"] = limits
    (folder / "Data_config.json").write_text(json.dumps(cfg))
    return folder


@pytest.mark.parametrize("limits, field", [
    ({"memory_mb": "lots"}, "memory_mb"),
    ({"cpu_seconds": True}, "cpu_seconds"),       # a bool is not a number of seconds
    ({"wall_seconds": -5}, "wall_seconds"),
    ({"memory_mb": 10**12}, "memory_mb"),
    ({"max_file_mb": 0}, "max_file_mb"),
    ({"wall_seconds": 30, "memory_mb": 1}, "memory_mb"),
])
def test_bad_sandbox_limits_fail_when_the_task_loads(examples, tmp_path, limits, field):
    with pytest.raises(TaskSpecError) as err:
        load_task(_task_with_limits(examples, tmp_path, limits))
    assert err.value.file == "Data_config.json"
    assert field in err.value.problem and "between" in err.value.problem


def test_a_two_to_the_forty_token_budget_is_refused():
    with pytest.raises(ValueError, match="max_tokens must be between 1 and 100,000,000"):
        Budget(max_tokens=2**40)


def test_the_engine_cli_refuses_a_huge_token_budget_before_running(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "engine", "run", "examples/discontinuous-1d",
                           "--max-tokens", str(2**40), "--runs-dir", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert f"--max-tokens: must be between 1 and {MAX_TOKENS:,}" in proc.stderr
    assert not any(tmp_path.iterdir())  # no run started


@pytest.mark.parametrize("command, args", [
    ("run_task", ["examples/discontinuous-1d", "--max-tokens", str(2**40)]),
    ("evolve", ["examples/discontinuous-1d", "--max-tokens", str(2**40)]),
    ("run_task", ["examples/discontinuous-1d", "--seed", "1" * 20]),
])
def test_management_commands_refuse_out_of_range_numbers(command, args):
    with pytest.raises(CommandError, match="must be between"):
        call_command(command, *args)


# --- the studio ---------------------------------------------------------------------------

@pytest.fixture
def no_redis(settings):
    """Live pushes go to an in-memory channel layer: these pages need no Redis."""
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}


@pytest.fixture
def run(examples, db, no_redis) -> Run:
    return running_run(examples / "diabetes-progression", "Limits")


@pytest.fixture
def client(db) -> Client:
    # A superuser may do everything in every project, so these tests exercise the limits alone.
    admin = get_user_model().objects.create_superuser("limits", "l@example.org", "limits-pass")
    c = Client()
    c.force_login(admin)
    return c


def test_a_one_megabyte_procedure_edit_is_a_form_error_and_no_version(run, client):
    before = run.versions.count()
    page = client.post(f"/runs/{run.pk}/editor", {"kind": "procedure", "role": "coder", "procedure": ONE_MB})
    assert page.status_code == 422
    assert (f"the coder procedure is {len(ONE_MB.strip()):,} characters long; the limit is 16,000"
            in page.content.decode())
    assert run.versions.count() == before


def test_a_contract_edit_too_long_is_a_form_error(run, client):
    edge = "coder->debugger:code"
    page = client.post(f"/runs/{run.pk}/editor", {"kind": "contract", "edge": edge, "contract": "x" * 5000})
    assert page.status_code == 422
    assert "the contract is 5,000 characters long; the limit is 2,000" in page.content.decode()
    assert run.versions.count() == 1


def test_a_contract_edit_naming_no_edge_is_a_form_error_not_a_500(run, client):
    page = client.post(f"/runs/{run.pk}/editor", {"kind": "contract", "edge": "nonsense", "contract": "python"})
    assert page.status_code == 422
    assert "choose an edge of this workflow" in page.content.decode()
    assert run.versions.count() == 1


def _new_run(client, **overrides):
    from webapp.runs.forms import example_choices

    form = {"project": "Limits", "task_folder": example_choices()[0][0], "search": "mimosa", "iterations": 2,
            "gate_policy": "manual", "seed": 0, "model": "", "max_tokens": 100_000, **overrides}
    return client.post("/runs/new", form)


@pytest.mark.parametrize("field, value, message", [
    ("seed", "1" * 20, "Ensure this value is less than or equal to 2147483647."),
    ("seed", "-1", "Ensure this value is greater than or equal to 0."),
    ("max_tokens", str(2**40), "Ensure this value is less than or equal to 100000000."),
    ("model", "openai/gpt-4o; rm -rf /", "write a litellm model as provider/model"),
])
def test_out_of_range_run_options_are_form_errors(run, client, field, value, message):
    runs = Run.objects.count()
    page = _new_run(client, **{field: value})
    assert page.status_code == 400
    assert message in page.content.decode()
    assert Run.objects.count() == runs


def test_an_oversize_decision_reason_is_refused_and_the_mutation_still_waits(run, client):
    row = proposed_mutation(run)
    page = client.post(f"/mutations/{row.pk}/veto", {"reason": "no " * 100_000})
    assert page.status_code == 400
    assert "at most 2000 characters" in page.content.decode()
    row.refresh_from_db()
    assert row.status == MutationStatus.PROPOSED


def test_a_trace_filter_that_is_not_an_ascii_number_is_ignored_not_a_500(run, client):
    page = client.get(f"/runs/{run.pk}/trace?iteration=\u00b2")  # "²" passed str.isdigit()
    assert page.status_code == 200
