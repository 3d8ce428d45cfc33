"""Faults from the model side (issue 9, item 5): a model that does not exist or a provider
without its API key must fail the run loudly with the provider's own message (engine, command
line, studio), never "complete" with 0 tokens; such a run is never archived; and a probe that
runs again after a resume writes its own trace, so replay counts each attempt once."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import engine.gateway
from engine.budget import Budget
from engine.errors import ModelCallError, ModelUnavailable, RunInterrupted
from engine.evolve import evolve
from engine.gateway import ModelGateway
from engine.llm import get_litellm
from engine.replay import rebuild, rebuild_from_file, rebuild_run_dir
from engine.run_spec import RunSpec
from engine.runner import RunConfig, run_workflow
from engine.synthesis import team_workflow
from engine.task import load_task
from engine.trace import ListSink, Tracer, read_events, trace_attempts
from tests.fakes import FakeExecutor

ROOT = Path(__file__).resolve().parents[2]
UNKNOWN_PROVIDER = "nosuchprovider/x"
PROVIDER_SAYS = "LLM Provider NOT provided"  # litellm's words for an unknown provider prefix


def _env(tmp_path: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("TRELLIS_MODEL")}
    return {**env, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "TRELLIS_VAR_DIR": str(tmp_path / "var")}


@pytest.fixture
def disc(examples):
    return load_task(examples / "discontinuous-1d")


@pytest.fixture
def no_api_keys(monkeypatch):
    for key in [k for k in os.environ if k.endswith("_API_KEY") or k.startswith("TRELLIS_MODEL")]:
        monkeypatch.delenv(key)


@pytest.fixture
def fake_provider():
    """Registers a litellm provider ``fake/...`` whose answers the test scripts (a callable)."""
    from litellm import CustomLLM
    from litellm.types.utils import ModelResponse

    script: dict = {}

    class Handler(CustomLLM):
        def completion(self, model, messages, *a, **k):
            text = script["answer"](messages)
            return ModelResponse(model=model, choices=[{"index": 0, "message": {"role": "assistant", "content": text}}])

    litellm = get_litellm()
    litellm.custom_provider_map = [*litellm.custom_provider_map, {"provider": "fake", "custom_handler": Handler()}]
    yield script
    litellm.custom_provider_map = [p for p in litellm.custom_provider_map if p["provider"] != "fake"]


# --- the gateway tells a provider that cannot serve from a bad answer ---------------------------
def _gateway(**kw) -> ModelGateway:
    return ModelGateway(Budget(), Tracer("t", [ListSink()]), **kw)


def _raising(exc_factory, calls: list):
    def completion(**request):
        calls.append(request)
        raise exc_factory(request["model"])
    return completion


def test_a_rejected_key_fails_at_once_with_the_providers_message(monkeypatch):
    litellm = get_litellm()
    calls: list = []
    monkeypatch.setattr(litellm, "completion", _raising(lambda m: litellm.AuthenticationError(
        message="Incorrect API key provided: sk-wrong", llm_provider="openai", model=m), calls))
    with pytest.raises(ModelUnavailable) as info:
        _gateway(model_override="openai/gpt-4o-mini").complete("coder", "coder", [{"role": "user", "content": "hi"}])
    assert len(calls) == 1  # retrying a wrong key cannot help
    assert info.value.kind == "authentication" and "Incorrect API key provided" in str(info.value)
    assert calls[0]["num_retries"] == 0 and calls[0]["timeout"] <= 300  # no hidden retries, no 10-minute wait


def test_a_provider_that_stays_down_is_retried_then_fails_the_run(monkeypatch):
    litellm = get_litellm()
    calls: list = []
    slept: list = []
    monkeypatch.setattr(litellm, "completion", _raising(lambda m: litellm.APIConnectionError(
        message="Connection refused", llm_provider="openai", model=m), calls))
    monkeypatch.setattr(engine.gateway.time, "sleep", slept.append)
    with pytest.raises(ModelUnavailable) as info:
        _gateway(model_override="openai/gpt-4o-mini", retries=2).complete("planner", "planner", [{"role": "user", "content": "x"}])
    assert len(calls) == 3 and len(slept) == 2 and info.value.attempts == 3
    assert "Connection refused" in str(info.value) and info.value.agent == "planner"


def test_an_empty_answer_is_a_bad_answer_for_the_step_not_a_dead_provider(fake_provider, monkeypatch):
    fake_provider["answer"] = lambda messages: ""
    slept: list = []
    monkeypatch.setattr(engine.gateway.time, "sleep", slept.append)
    with pytest.raises(ModelCallError) as info:
        _gateway(model_override="fake/empty").complete("coder", "coder", [{"role": "user", "content": "x"}])
    # the step gets it (and may repair or retry); the run goes on, and asking again needs no back-off
    assert not isinstance(info.value, ModelUnavailable) and "empty answer" in str(info.value)
    assert slept == []


def test_real_litellm_errors_offline_are_classified(no_api_keys):
    """No network here: an unknown provider prefix and a missing key fail inside litellm, fast."""
    for model, kind, words in ((UNKNOWN_PROVIDER, "bad_request", PROVIDER_SAYS),
                               ("anthropic/claude-3-5-haiku-latest", "authentication", "ANTHROPIC_API_KEY"),
                               ("openai/gpt-4o-mini", "authentication", "OPENAI_API_KEY")):
        with pytest.raises(ModelUnavailable) as info:
            _gateway(model_override=model).complete("analyzer", "analyzer", [{"role": "user", "content": "x"}])
        assert info.value.kind == kind and words in str(info.value), (model, str(info.value))
        assert "\n" not in str(info.value)  # one console line


# --- the engine: the run stops, its trace says why --------------------------------------------
def test_unknown_model_fails_the_run_with_the_providers_message_in_its_trace(disc, tmp_path):
    sink = ListSink()
    with pytest.raises(ModelUnavailable) as info:
        run_workflow(disc, team_workflow(disc), RunConfig(run_dir=tmp_path / "run", model_override=UNKNOWN_PROVIDER),
                     sinks=[sink])
    assert PROVIDER_SAYS in str(info.value)
    kinds = [e.kind for e in sink.events]
    assert kinds[-1] == "run_failed" and "run_finished" not in kinds
    failed = sink.events[-1]
    assert failed.agent == "analyzer" and PROVIDER_SAYS in failed.payload["reason"]
    # only the first agent was tried: no agent after it ran on a model that cannot answer
    assert [e.agent for e in sink.events if e.kind == "agent_started"] == ["analyzer"]
    record = rebuild_from_file(tmp_path / "run" / "trace.jsonl")
    assert record.status == "failed" and PROVIDER_SAYS in record.reason and record.usage.calls == 0


# --- the command line: one line, non-zero exit, no traceback, nothing archived --------------------
@pytest.mark.slow  # a whole CLI process: Django, litellm and the engine start in it
def test_engine_cli_with_a_missing_key_prints_one_error_line_and_exits_non_zero(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "engine", "run", "examples/discontinuous-1d", "--model",
                           "openai/gpt-4o-mini", "--runs-dir", str(tmp_path / "runs")],
                          cwd=ROOT, env=_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "openai/gpt-4o-mini is unavailable" in errors[0] and "OPENAI_API_KEY" in errors[0]
    trace = next((tmp_path / "runs").glob("*/trace.jsonl"))
    assert [e.kind for e in read_events(trace)][-1] == "run_failed"


@pytest.mark.slow  # a whole CLI process: Django, litellm and the engine start in it
def test_manage_py_evolve_with_an_unknown_provider_fails_and_archives_nothing(tmp_path):
    proc = subprocess.run([sys.executable, "manage.py", "evolve", "examples/discontinuous-1d", "--iterations", "1",
                           "--model", UNKNOWN_PROVIDER], cwd=ROOT, env=_env(tmp_path), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode != 0, proc.stdout
    assert "Traceback" not in proc.stderr and PROVIDER_SAYS in proc.stderr
    assert "nothing archived" in proc.stdout
    archive = tmp_path / "var" / "archive" / "entries"
    assert not archive.exists() or not any(archive.iterdir())
    search = next((tmp_path / "var" / "runs").glob("*/search.jsonl"))
    failed = [e for e in read_events(search) if e.kind == "search_failed"]
    assert failed and PROVIDER_SAYS in failed[0].payload["reason"]


# --- a run that made no model call, or whose final workflow failed, is never archived -------------
@pytest.mark.parametrize("answer, why", [
    (lambda messages: "", "made no model call"),                 # every answer empty: no call succeeds
    (lambda messages: "no idea, sorry", "failed"),                # answers, but nothing usable comes of them
])
def test_a_search_whose_final_workflow_did_nothing_is_not_archived(examples, tmp_path, fake_provider, answer, why):
    fake_provider["answer"] = answer
    log = tmp_path / "log"
    with log.open("w") as out:
        result = evolve(examples / "discontinuous-1d",
                        RunSpec(search="mimosa", iterations=0, model="fake/model", single_agent=False),
                        runs_dir=tmp_path / "runs", out=out, archive_dir=tmp_path / "archive")
    assert why in result.archived.get("skipped", ""), result.archived
    entries = tmp_path / "archive" / "entries"
    assert not entries.exists() or not any(entries.iterdir())
    assert "not archived: " in log.read_text()
    archive_events = [e for e in read_events(result.run_dir / "search.jsonl") if e.kind == "archive"]
    assert archive_events and "entry" not in archive_events[0].payload


# --- a probe re-run after a resume writes its own trace --------------------------------------
class _InterruptAtFirstModelCall:
    """Kills the search the way a lost worker does, in the middle of its first probe."""

    def emit(self, event) -> None:
        if event.kind == "model_call":
            raise RunInterrupted("worker lost (test)")

    def close(self) -> None:
        pass


def test_a_probe_rerun_after_resume_has_its_own_trace_and_replay_counts_it_once(examples, tmp_path):
    run_dir = tmp_path / "search"
    with (tmp_path / "log").open("w") as out:
        with pytest.raises(RunInterrupted):
            evolve(examples / "discontinuous-1d", RunSpec(search="mimosa", iterations=1, single_agent=False),
                   run_dir=run_dir, out=out, sinks=[_InterruptAtFirstModelCall()],
                   executor=FakeExecutor(tmp_path / "sandbox"))
        # No checkpoint was written before the interruption: resume starts again, in the same folder.
        result = evolve(examples / "discontinuous-1d", RunSpec(search="mimosa", iterations=1, single_agent=False),
                        run_dir=run_dir, out=out, executor=FakeExecutor(tmp_path / "sandbox"))
    probe_dir = run_dir / "probes" / "001-initial"
    attempts = trace_attempts(probe_dir)
    assert [n for n, _ in attempts] == [1, 2]
    assert [p.name for _, p in attempts] == ["trace.jsonl", "trace.2.jsonl"]
    for _, path in attempts:  # numbering never restarts inside one file
        seqs = [e.seq for e in read_events(path)]
        assert seqs == list(range(1, len(seqs) + 1))
    first, second = (list(read_events(p)) for _, p in attempts)
    assert first[0].run_id != second[0].run_id and second[0].payload["attempt"] == 2
    summary = json.loads((probe_dir / "summary.json").read_text())
    assert summary["trace_path"].endswith("trace.2.jsonl")
    # replay of the folder, or of both attempts' events together, counts the latest attempt once
    assert rebuild_run_dir(probe_dir).usage.to_dict() == summary["usage"]
    both = rebuild(first + second)
    assert both.usage.to_dict() == summary["usage"] and both.attempt == 2 and both.status == summary["status"]
    # a trace written the old way (both attempts appended to one file, numbering restarting)
    legacy = [*first, *(e.__class__(first[0].run_id, e.seq, e.ts, e.kind, e.agent, e.iteration,
                                    {k: v for k, v in e.payload.items() if k != "attempt"}) for e in second)]
    assert rebuild(legacy).usage.to_dict() == summary["usage"]
    # the resumed search has its own search trace too; the search's result rests on attempt 2
    assert (run_dir / "search.jsonl").is_file() and (run_dir / "search.2.jsonl").is_file()
    assert result.trace.endswith("search.2.jsonl") and result.initial["official"]["ok"]


# --- the studio: the run is failed, with the provider's message where a person looks ------------
@pytest.mark.django_db(transaction=True)
def test_studio_run_with_an_unknown_model_is_failed_with_the_providers_message(examples, tmp_path, settings,
                                                                               demo_user):
    from django.test import Client

    from tests.studio_harness import add_member
    from webapp.runs.models import Run, RunStatus
    from webapp.runs.tasks import execute_run
    from webapp.tasks.models import Task
    from webapp.teams.models import Project

    settings.TRELLIS_ARCHIVE_DIR = tmp_path / "archive"
    folder = examples / "discontinuous-1d"
    project = Project.objects.create(name="p")
    task = Task.objects.create(project=project, name="discontinuous-1d", folder=str(folder))
    run = Run.objects.create(task=task, status=RunStatus.QUEUED, lease="L", search="mimosa", iterations=1,
                             model=UNKNOWN_PROVIDER, run_dir=str(tmp_path / "run"), created_by=demo_user)
    assert execute_run(run.pk, "L") == RunStatus.FAILED
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and run.result is None
    assert PROVIDER_SAYS in run.status_reason and "Traceback" not in run.status_reason
    assert run.events.filter(kind="run_failed").exists() and run.events.filter(kind="search_failed").exists()
    assert not (tmp_path / "archive" / "entries").exists()
    add_member(project, demo_user, "viewer")
    client = Client()
    client.force_login(demo_user)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert PROVIDER_SAYS in page
