"""Issue 37, item 1: a signed-in account with no rights uploaded a task (so owned a project),
started a run with ``api_base`` pointing at its own listener and ``api_key_env=TRELLIS_VAR_DIR``,
and the listener received ``Authorization: Bearer <the worker's variable>``. Every endpoint and key
variable a run may name is now the operator's: the form refuses others by name (without saying
whether a variable is set), the worker refuses them again before any request (settings saved
earlier, an agent's own endpoint in a forked workflow), and the listener hears nothing."""
from __future__ import annotations

import json
import socket
import threading

import pytest
from django.test import Client

from engine.models import EndpointPolicy, ModelOptions, ModelSettings, ModelSettingsError
from engine.synthesis import team_workflow
from engine.task import load_task
from webapp.runs import controls
from webapp.runs.bridge import record_version
from webapp.runs.forms import example_choices
from webapp.runs.models import Run, RunStatus
from webapp.tasks.models import Task
from webapp.teams.models import Project

pytestmark = pytest.mark.django_db(transaction=True)


class Listener:
    """A TCP server on loopback that records every connection it is offered."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.heard: list[bytes] = []
        self.stopped = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"

    def _serve(self) -> None:
        while not self.stopped:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            conn.settimeout(1)
            try:
                self.heard.append(conn.recv(65536))
            except OSError:
                self.heard.append(b"")
            conn.close()

    def close(self) -> None:
        self.stopped = True
        self.thread.join(timeout=2)
        self.sock.close()


@pytest.fixture
def listener():
    ear = Listener()
    yield ear
    ear.close()


@pytest.fixture
def client(demo_user, monkeypatch) -> Client:
    monkeypatch.setattr(controls, "_publish", lambda run, lease: None)
    c = Client()
    c.force_login(demo_user)
    return c


def _post(client: Client, **fields):
    form = {"project": "Mine", "task_folder": example_choices()[0][0], "search": "mimosa", "iterations": 1,
            "gate_policy": "manual", "seed": 0, "max_tokens": 100_000, "executor": "subprocess",
            "model": "openai/x", **fields}
    return client.post("/runs/new", form)


def test_the_form_refuses_an_endpoint_and_a_key_variable_the_operator_did_not_allow(client, listener, settings):
    settings.TRELLIS_MODEL_ENDPOINTS = ["http://127.0.0.1:1/v1"]
    page = _post(client, api_base=listener.url, api_key_env="TRELLIS_VAR_DIR")
    assert page.status_code == 400
    errors = page.context["form"].errors
    assert "is not an endpoint this project may use" in errors["api_base"][0]
    assert "allowed: http://127.0.0.1:1/v1" in errors["api_base"][0]
    assert "TRELLIS_VAR_DIR" in errors["api_key_env"][0] and "not one this project may use" in errors["api_key_env"][0]
    assert not Run.objects.exists() and listener.heard == []


def test_a_refused_key_variable_says_the_same_whether_or_not_it_is_set(client, monkeypatch):
    monkeypatch.delenv("TRELLIS_NOBODY_SET_THIS", raising=False)
    set_one = _post(client, api_key_env="TRELLIS_VAR_DIR").context["form"].errors["api_key_env"][0]
    unset = _post(client, api_key_env="TRELLIS_NOBODY_SET_THIS").context["form"].errors["api_key_env"][0]
    assert set_one.replace("TRELLIS_VAR_DIR", "X") == unset.replace("TRELLIS_NOBODY_SET_THIS", "X")


def test_per_role_lines_are_held_to_the_same_bounds(client, listener):
    page = _post(client, role_settings=f"coder:api_base={listener.url}\njudge:api_key_env=TRELLIS_SECRET_KEY")
    assert page.status_code == 400
    errors = " ".join(page.context["form"].errors["role_settings"])
    assert "role coder" in errors and "role judge" in errors
    assert not Run.objects.exists()


def test_an_allowed_endpoint_is_taken(client, settings):
    settings.TRELLIS_MODEL_ENDPOINTS = ["http://llm.lab:8000"]
    page = _post(client, api_base="http://llm.lab:8000/v1")
    assert page.status_code == 302, page.context["form"].errors


def test_credentials_inside_an_allowed_url_are_refused():
    policy = EndpointPolicy(api_bases=("http://llm.lab:8000",))
    assert policy.problems(ModelOptions(api_base="http://user:pw@llm.lab:8000/v1"))
    assert "pw" not in policy.problems(ModelOptions(api_base="http://user:pw@llm.lab:8000/v1"))[0]
    assert not policy.allows_base("http://llm.lab:8001/v1") and not policy.allows_base("http://llm.lab:8000v1")


@pytest.mark.parametrize("url", ["http://llm.lab:8000/v1/../admin", "http://llm.lab:8000/v1/%2e%2e/admin",
                                 "http://llm.lab:8000/v1/.%2E/x", "http://llm.lab:8000/v1/\\..\\x",
                                 "http://llm.lab:8000/v1?next=http://evil", "http://llm.lab.evil.com:8000/v1"])
def test_an_allowed_endpoints_host_is_not_a_way_to_another_path(url):
    """An attack of this session's own: an allowed base's prefix let /v1/../admin through."""
    policy = EndpointPolicy(api_bases=("http://llm.lab:8000/v1",))
    assert not policy.allows_base(url)
    assert policy.allows_base("http://LLM.lab:8000/v1/chat")


def _run_with(settings_dict: dict, tmp_path) -> Run:
    folder = example_choices()[0][0]
    project = Project.objects.create(name="Theirs")
    task = Task.objects.create(project=project, name="t", folder=folder)
    run = Run.objects.create(task=task, status=RunStatus.QUEUED, lease="L", search="mimosa", iterations=1,
                             model="openai/x", model_settings=settings_dict, run_dir=str(tmp_path / "run"))
    record_version(run, team_workflow(load_task(folder)).to_dict(), "engine", "initial", 0)
    return run


def test_the_worker_refuses_settings_saved_before_the_operator_bounded_them(listener, tmp_path):
    run = _run_with({"run": {"model": "openai/x", "api_base": listener.url, "api_key_env": "TRELLIS_VAR_DIR"}},
                    tmp_path)
    from webapp.runs.tasks import execute_run

    assert execute_run(run.pk, "L") == RunStatus.FAILED
    run.refresh_from_db()
    assert "is not an endpoint this project may use" in run.status_reason
    assert listener.heard == []


def test_an_agents_own_endpoint_in_a_forked_workflow_is_refused(demo_user, listener, tmp_path):
    run = _run_with({}, tmp_path)
    Run.objects.filter(pk=run.pk).update(status=RunStatus.COMPLETED)
    from tests.studio_harness import add_member

    add_member(run.task.project, demo_user, "owner")
    workflow = dict(run.versions.get(number=0).data) if run.versions.filter(number=0).exists() \
        else dict(run.versions.first().data)
    workflow.pop("hash", None)
    workflow["agents"][0]["model_options"] = {"api_base": listener.url, "api_key_env": "TRELLIS_VAR_DIR"}
    c = Client()
    c.force_login(demo_user)
    number = run.versions.first().number
    page = c.post(f"/runs/{run.pk}/versions/{number}/fork", {"workflow": json.dumps(workflow)})
    assert page.status_code == 422
    assert "is not an endpoint this project may use" in page.content.decode()
    assert Run.objects.count() == 1 and listener.heard == []


def test_the_engine_refuses_an_agents_endpoint_outside_the_policy_and_trusts_the_environment():
    policy = EndpointPolicy(api_bases=("http://llm.lab:8000/v1",))
    models = ModelSettings(ModelOptions(model="openai/x")).bounded(policy)
    with pytest.raises(ModelSettingsError, match="not an endpoint"):
        models.endpoint("coder", None, ModelOptions(api_base="http://127.0.0.1:9/v1"), env={})
    with pytest.raises(ModelSettingsError, match="TRELLIS_VAR_DIR"):
        models.endpoint("coder", None, ModelOptions(api_key_env="TRELLIS_VAR_DIR"), env={})
    # the operator's own environment is allowed as it stands
    env = {"TRELLIS_API_BASE": "http://gpu-box:8000/v1", "TRELLIS_API_KEY_ENV": "LAB_KEY"}
    assert models.endpoint("coder", env=env).api_base == "http://gpu-box:8000/v1"
    assert models.endpoint("coder", None, ModelOptions(api_base="http://llm.lab:8000/v1/chat"), env={}).api_base
