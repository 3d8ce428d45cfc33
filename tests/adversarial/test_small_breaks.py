"""Issue 37, item 9: the low ones. Deeply nested JSON in the fork form, an annotation import line
or a live socket message was a 500 (RecursionError); four people signing up on one invitation at
once left three accounts behind; password-reset mail was not throttled (30 in a row sent); and
/healthz showed anyone the worker count and the free disk."""
from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.core import mail
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from engine.synthesis import team_workflow
from engine.task import load_task
from tests.studio_harness import add_member, running_run
from webapp.runs.bridge import record_version
from webapp.runs.models import Run, RunStatus
from webapp.teams import invitations
from webapp.teams.models import Role

pytestmark = pytest.mark.django_db(transaction=True)
DEEP = "[" * 100_000 + "]" * 100_000


@pytest.fixture
def owned(light_task, demo_user):
    run = running_run(light_task, "Small breaks")
    add_member(run.task.project, demo_user, "owner")
    c = Client()
    c.force_login(demo_user)
    return run, c


def test_deeply_nested_json_is_a_named_refusal_not_a_500(owned):
    run, c = owned
    Run.objects.filter(pk=run.pk).update(status=RunStatus.COMPLETED)
    record_version(run, team_workflow(load_task(run.task.folder)).to_dict(), "engine", "initial", 0)
    number = run.versions.first().number
    fork = c.post(f"/runs/{run.pk}/versions/{number}/fork", {"workflow": '{"agents": ' + DEEP + "}"})
    assert fork.status_code == 422 and "nested too deeply" in fork.content.decode()
    page = c.post(f"/projects/{run.task.project.pk}/annotations/import",
                  {"file": SimpleUploadedFile("deep.jsonl", (DEEP + "\n").encode())})
    assert page.status_code == 400 and "nested too deeply" in page.content.decode()


def test_one_invitation_taken_by_several_at_once_leaves_one_account(owned, monkeypatch):
    run, c = owned
    row, link = invitations.invite(run.task.project, Role.VIEWER, get_user_model().objects.get(username="ada"))
    token = link.rstrip("/").rsplit("/", 1)[1]
    stale = invitations.find(token)  # what each of the simultaneous sign-ups read before any joined
    monkeypatch.setattr(invitations, "find", lambda t: stale)
    users = get_user_model().objects
    before = users.count()
    answers = [Client().post(f"/invite/{token}", {"username": f"p{i}", "password1": "a-long-pass-2468",
                                                  "password2": "a-long-pass-2468"}) for i in range(4)]
    assert sorted(a.status_code for a in answers) == [302, 410, 410, 410]
    assert users.count() == before + 1


def test_password_reset_mail_is_throttled_and_says_the_same(demo_user, settings):
    demo_user.email = "ada@example.org"
    demo_user.save()
    c = Client()
    answers = [c.post("/password-reset/", {"email": "ada@example.org"}) for _ in range(30)]
    assert len(mail.outbox) == settings.TRELLIS_PASSWORD_RESETS_PER_ADDRESS
    assert {a.status_code for a in answers} == {302} and {a.url for a in answers} == {"/password-reset/sent/"}


def test_healthz_tells_a_stranger_only_whether_the_studio_is_well():
    stranger = Client(REMOTE_ADDR="203.0.113.9").get("/healthz").json()
    assert "ok" in stranger and "disk" in stranger
    assert not {"workers", "training_slots", "disk_free_mb"} & set(stranger)
    proxied = Client(REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR="203.0.113.9").get("/healthz").json()
    assert "disk_free_mb" not in proxied
    local = Client(REMOTE_ADDR="127.0.0.1").get("/healthz").json()
    assert "disk_free_mb" in local and "workers" in local
