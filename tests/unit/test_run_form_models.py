"""The studio's run form takes the model a person brings: a server's URL, the variable holding
its key, answer length, context, timeout, structured output, prices and per-role models. What
it accepts reaches the engine as the run's ModelSettings; what the engine would refuse is a
form error on its own field, and no run is created."""
from __future__ import annotations

import pytest
from django.test import Client

from engine.models import ModelSettings
from webapp.runs import controls
from webapp.runs.forms import example_choices
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def operator_allows(settings):
    """The endpoints and key variable these tests name are the operator's choice (issue 37)."""
    settings.TRELLIS_MODEL_ENDPOINTS = ["http://ollama:11434/v1", "http://127.0.0.1:9000", "http://127.0.0.1:8080/v1"]
    settings.TRELLIS_MODEL_KEY_VARIABLES = ["TRELLIS_TEST_KEY_NOBODY_SET"]


@pytest.fixture
def client(demo_user, monkeypatch) -> Client:
    monkeypatch.setattr(controls, "_publish", lambda run, lease: None)  # no broker: the row is what is tested
    c = Client()
    c.force_login(demo_user)
    return c


def _post(client: Client, **fields):
    form = {"project": "Own model", "task_folder": example_choices()[0][0], "search": "mimosa", "iterations": 2,
            "gate_policy": "manual", "seed": 0, "max_tokens": 100_000, "executor": "subprocess", **fields}
    return client.post("/runs/new", form)


def test_the_home_page_offers_the_model_settings_folded(client):
    page = client.get("/").content.decode()
    assert '<details class="model-settings">' in page  # folded while nothing is set
    for name in ("api_base", "api_key_env", "max_answer_tokens", "context_tokens", "model_timeout_s",
                 "structured_output", "role_settings"):
        assert f'name="{name}"' in page
    # what the operator allows is said before anyone types (issue 37)
    assert "allowed here: http://ollama:11434/v1" in page and "allowed here: TRELLIS_TEST_KEY_NOBODY_SET" in page


def test_a_local_server_and_a_per_role_model_reach_the_engine(client, monkeypatch):
    page = _post(client, model="openai/smollm2", api_base="http://ollama:11434/v1", max_answer_tokens="512",
                 context_tokens="8192", model_timeout_s="900", structured_output="json_object",
                 role_settings="coder:model=openai/qwen-coder,max_answer_tokens=2048\n\n"
                               "verifier:api_base=http://127.0.0.1:9000/v1")
    assert page.status_code == 302, page.content.decode()[:2000]
    run = Run.objects.get()
    models = ModelSettings.from_dict(run.model_settings)
    coder, verifier, planner = (models.endpoint(r, env={}) for r in ("coder", "verifier", "planner"))
    assert (coder.model, coder.api_base, coder.max_answer_tokens) == ("openai/qwen-coder", "http://ollama:11434/v1", 2048)
    assert (verifier.model, verifier.api_base) == ("openai/smollm2", "http://127.0.0.1:9000/v1")
    assert (planner.max_answer_tokens, planner.context_tokens, planner.timeout_s, planner.structured) == \
        (512, 8192, 900.0, "json_object")
    header = client.get(page.url).content.decode()
    assert "openai/smollm2 at http://ollama:11434/v1" in header and "coder: openai/qwen-coder" in header


def test_the_worker_runs_the_engine_with_the_runs_model_settings(client, monkeypatch):
    _post(client, model="openai/m", api_base="http://127.0.0.1:8080/v1", role_settings="judge:model=openai/j")
    run = Run.objects.get()
    seen = {}

    def evolve(*args, **kwargs):
        seen.update(kwargs, args=args)
        raise controls.TrellisError("stop here")

    monkeypatch.setattr("engine.evolve.evolve", evolve)
    from webapp.runs.tasks import execute_run

    assert execute_run(run.pk, run.lease) == "failed"
    models = seen["args"][1].models
    assert models.endpoint("coder", env={}).api_base == "http://127.0.0.1:8080/v1"
    assert models.endpoint("judge", env={}).model == "openai/j"


@pytest.mark.parametrize("fields, field, message", [
    ({"api_base": "ollama:11434"}, "api_base", "is not an http(s) URL"),
    ({"api_key_env": "sk-live-1234567890abcdef"}, "api_key_env", "never the key itself"),
    ({"api_key_env": "TRELLIS_TEST_KEY_NOBODY_SET"}, "api_key_env", "is allowed but not set in the environment"),
    ({"max_answer_tokens": "4"}, "max_answer_tokens", "greater than or equal to 16"),
    ({"role_settings": "coder model=openai/x"}, "role_settings", "line 1: "),
    ({"role_settings": "coder:api_key=sk-123"}, "role_settings", "write api_key_env"),
    ({"role_settings": "coder:model=openai/a\ncoder:timeout_s=9"}, "role_settings", "coder is set twice"),
    # issue 37 item 15: a line for a role nothing plays was ignored in silence
    ({"role_settings": "codr:model=openai/a"}, "role_settings", "no role is called 'codr' (did you mean coder?)"),
])
def test_a_model_setting_the_engine_would_refuse_is_an_error_on_its_field(client, fields, field, message):
    page = _post(client, model="openai/m", **fields)
    assert page.status_code == 400
    form = page.context["form"]
    assert any(message in e for e in form.errors.get(field, [])), form.errors
    assert '<details class="model-settings" open>' in page.content.decode()  # the refused setting is shown
    assert not Run.objects.exists()


def test_every_role_that_asks_a_model_may_be_given_its_own_settings():
    from engine.answers import TREE
    from engine.harness import MODEL_ROLES
    from engine.search import registry
    from engine.search.scimars import EDITORS

    searched = {role for name in registry.SEARCHES for role in registry.search_class(name).model_roles}
    assert set(TREE) | set(EDITORS) | searched | {"judge", "evaluator", "reflector"} <= set(MODEL_ROLES)


def test_the_header_says_each_roles_own_endpoint(client):
    page = _post(client, model="openai/m", role_settings="coder:max_answer_tokens=2048\n"
                                                            "verifier:api_base=http://127.0.0.1:9000/v1")
    header = client.get(page.url).content.decode()
    assert "coder: openai/m (max answer tokens 2048)" in header
    assert "verifier: openai/m at http://127.0.0.1:9000/v1" in header and "own settings" not in header
