"""Issue 13.4 and 13.8: share links and the audit log.

An owner makes a signed, expiring, revocable link to a run; whoever opens it, with no account,
sees the run page, its JSON and fragments as a viewer would, with no write control on it, and
every write through the link (approve, veto, edit, annotate, note, pause/cancel/resume) is
refused with 403, changing nothing. A revoked or expired link opens nothing (410, a page that
says why). Every person's action that exists (decisions, edits, controls, starts, members,
notes, share links) writes one AuditEntry."""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import NoReverseMatch, reverse
from django.utils import timezone

from engine.synthesis import team_workflow
from engine.task import load_task
from tests.studio_harness import add_member, proposed_mutation
from webapp.runs.bridge import record_version
from webapp.runs.forms import example_choices
from webapp.runs.models import Event, Mutation, Run, RunStatus, ShareLink, WorkflowVersion
from webapp.tasks.models import Task
from webapp.teams.models import AuditEntry, Membership, Project

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def no_redis(settings, monkeypatch):
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    monkeypatch.setattr("webapp.runs.tasks.execute_run.apply_async", lambda *a, **k: None)


@dataclass
class Lab:
    project: Project
    run: Run
    mutation: Mutation
    owner: Client
    reviewer: Client


@pytest.fixture
def lab(examples, tmp_path) -> Lab:
    folder = examples / "diabetes-progression"
    spec = load_task(folder)
    project = Project.objects.create(name="Lab")
    task = Task.objects.create(project=project, name=spec.name, folder=str(folder))
    run = Run.objects.create(task=task, status=RunStatus.RUNNING, lease="L", search="mimosa",
                             heartbeat=timezone.now(), run_dir=str(tmp_path / "run"))
    record_version(run, team_workflow(spec).to_dict(), "engine", "initial", 0)
    Event.objects.create(run=run, seq=1, kind="model_call", agent="coder", ts=1.0, payload={"response": "fitted"})
    clients = {}
    for name in ("olive", "rex", "vera"):
        user = get_user_model().objects.create_user(name)
        add_member(project, user, {"olive": "owner", "rex": "reviewer", "vera": "viewer"}[name])
        clients[name] = Client()
        clients[name].force_login(user)
    return Lab(project, run, proposed_mutation(run), clients["olive"], clients["rex"])


def _create(lab: Lab, expiry: str = "1d", mode: str = "live") -> str:
    """The owner creates a link on the run page's share card; returns its path."""
    response = lab.owner.post(f"/runs/{lab.run.pk}/share-links", {"expiry": expiry, "mode": mode, "note": "for Sam"})
    assert response.status_code == 200, response.content
    urls = re.findall(r'value="http://testserver(/share/[^"]+/)"', response.content.decode())
    assert urls, "the new link is listed for copying"
    return urls[0]


def _snapshot() -> dict:
    return {"runs": list(Run.objects.order_by("pk").values_list("pk", "status", "lease")),
            "mutations": list(Mutation.objects.order_by("pk").values_list("pk", "status", "decided_by")),
            "versions": list(WorkflowVersion.objects.order_by("pk").values_list("pk", "hash")),
            "members": list(Membership.objects.order_by("pk").values_list("pk", "role")),
            "links": list(ShareLink.objects.order_by("pk").values_list("pk", "revoked"))}


def test_an_owner_creates_a_link_that_opens_the_run_read_only_without_an_account(lab):
    page = lab.owner.get(f"/runs/{lab.run.pk}/")
    assert b'id="share-title"' in page.content  # the owner's share card
    assert b'id="share-title"' not in lab.reviewer.get(f"/runs/{lab.run.pk}/").content

    path = _create(lab, "1h")
    link = ShareLink.objects.get()
    assert link.run == lab.run and link.created_by.username == "olive" and link.note == "for Sam"
    assert timedelta(minutes=59) < link.expires - timezone.now() <= timedelta(hours=1)

    anonymous = Client()
    response = anonymous.get(path)
    assert response.status_code == 200
    html = response.content.decode()
    assert f"Run {lab.run.pk}" in html and "read-only" in html
    # the live stream joins through the link; the page's own URLs stay inside it
    assert f'data-ws="/ws/runs/{lab.run.pk}/?share=' in html
    assert f'data-graph="{path}graph.json"' in html and f"/runs/{lab.run.pk}/" not in html.replace(
        f"/ws/runs/{lab.run.pk}/", "")
    # no write control of any kind
    for control in ("control/pause", "control/cancel", "Pause</button>", "share-links", "ev-form", "<form"):
        assert control not in html, control
    assert anonymous.get(path + "graph.json").json()["elements"]
    queue = anonymous.get(path + "queue").content.decode()
    assert f"mutation-{lab.mutation.pk}" in queue and "/approve" not in queue and "/veto" not in queue
    assert b"fitted" in anonymous.get(path + "events/1", {"field": "response"}).content
    assert anonymous.get(path + "editor").status_code == 200
    assert b"editor-readonly" in anonymous.get(path + "editor").content
    # the link is the run's only: the owner's link list, members and another path are not reachable
    assert anonymous.get(path + "share-links").status_code == 403
    assert anonymous.get(f"/runs/{lab.run.pk}/").status_code == 302  # the run itself still needs an account


def test_every_write_through_a_link_is_refused_and_changes_nothing(lab):
    path = _create(lab)
    anonymous = Client()
    anonymous.get(path)
    before = _snapshot()
    writes = {
        "approve": (f"mutations/{lab.mutation.pk}/approve", {"reason": "ok"}),
        "veto": (f"mutations/{lab.mutation.pk}/veto", {"reason": "no"}),
        "edit": ("editor", {"kind": "procedure", "role": "planner", "procedure": "Prefer gradient boosting."}),
        "annotate": ("annotations", {"target_kind": "event", "target_ref": "1", "comment": "wrong path"}),
        "note": ("evidence/records", {"kind": "note", "text": "look at fold 2"}),
        "pause": ("control/pause", {}), "cancel": ("control/cancel", {}), "resume": ("control/resume", {}),
        "revoke itself": (f"share-links/{ShareLink.objects.get().pk}/revoke", {}),
    }
    for name, (rest, data) in writes.items():
        response = anonymous.post(path + rest, data)
        assert response.status_code == 403, (name, response.status_code)
        assert b"read-only" in response.content, name
    # the write endpoints themselves, without an account: to the login page, nothing done
    for rest, data in ((f"/mutations/{lab.mutation.pk}/approve", {"reason": "ok"}),
                       (f"/runs/{lab.run.pk}/control/cancel", {}), (f"/runs/{lab.run.pk}/evidence/records",
                                                                  {"kind": "note", "text": "x"})):
        assert anonymous.post(rest, data).status_code == 302
    # a CSRF-checking browser gets 403 as well
    strict = Client(enforce_csrf_checks=True)
    assert strict.post(path + "control/pause").status_code == 403
    assert _snapshot() == before
    assert not AuditEntry.objects.exclude(action="share_created").exists()


def test_a_revoked_or_expired_link_opens_nothing_and_says_why(lab):
    path = _create(lab)
    link = ShareLink.objects.get()
    assert Client().get(path).status_code == 200
    response = lab.owner.post(f"/runs/{lab.run.pk}/share-links/{link.pk}/revoke")
    assert response.status_code == 200 and b"revoked" in response.content
    for rest in ("", "graph.json", "queue", "events/1"):
        gone = Client().get(path + rest)
        assert gone.status_code == 410, rest
        assert b"was revoked" in gone.content and b"Ask the run" in gone.content
    assert lab.owner.post(f"/runs/{lab.run.pk}/share-links/{link.pk}/revoke").status_code == 409

    path = _create(lab, "7d")
    ShareLink.objects.filter(revoked__isnull=True).update(expires=timezone.now() - timedelta(seconds=1))
    expired = Client().get(path)
    assert expired.status_code == 410 and b"expired on" in expired.content


def test_only_owners_manage_links_and_bad_choices_are_refused(lab):
    assert lab.reviewer.get(f"/runs/{lab.run.pk}/share-links").status_code == 403
    assert lab.reviewer.post(f"/runs/{lab.run.pk}/share-links", {"expiry": "1d"}).status_code == 403
    bad = lab.owner.post(f"/runs/{lab.run.pk}/share-links", {"expiry": "forever", "mode": "live"})
    assert bad.status_code == 400 and b"1 hour, 1 day, 7 days" in bad.content
    assert lab.owner.post(f"/runs/{lab.run.pk}/share-links", {"expiry": "1d", "mode": "edit"}).status_code == 400
    assert not ShareLink.objects.exists()


def test_a_replay_link_shows_the_replay_or_else_the_run_page(lab):
    path = _create(lab, mode="replay")
    response = Client().get(path)
    assert response.status_code == 200
    html = response.content.decode()
    try:
        reverse("replay", args=[lab.run.pk])
    except NoReverseMatch:  # no replay page in this studio: the run page, read-only, says so
        assert 'id="replay-missing"' in html
        return
    assert 'id="replay"' in html and f'data-json="{path}replay/' in html
    events = Client().get(path + "replay/events.json")
    assert events.status_code == 200 and events.json()
    assert Client().post(path + "replay/events.json").status_code == 403


def test_every_persons_action_writes_an_audit_entry(lab, tmp_path):
    rex = lab.reviewer
    assert rex.post(f"/mutations/{lab.mutation.pk}/approve", {"reason": "fine"}).status_code == 200
    assert rex.post(f"/runs/{lab.run.pk}/editor", {"kind": "procedure", "role": "planner",
                                                   "procedure": "Prefer gradient boosting."}).status_code == 200
    assert rex.post(f"/runs/{lab.run.pk}/control/pause").status_code == 200
    assert rex.post(f"/runs/{lab.run.pk}/control/pause").status_code == 409  # refused: not audited
    response = rex.post("/runs/new", {"project": "Lab", "task_folder": example_choices()[0][0], "search": "mimosa",
                                      "iterations": 1, "gate_policy": "manual", "seed": 0, "model": "",
                                      "max_tokens": 100_000})
    assert response.status_code == 302
    get_user_model().objects.create_user("newton")
    members = f"/projects/{lab.project.pk}/members"
    assert lab.owner.post(members, {"action": "add", "username": "newton", "role": 10}).status_code == 302
    newton = Membership.objects.get(user__username="newton")
    assert lab.owner.post(members, {"action": "role", "member": newton.pk, "role": 20}).status_code == 302
    assert lab.owner.post(members, {"action": "remove", "member": newton.pk}).status_code == 302
    note = rex.post(f"/runs/{lab.run.pk}/evidence/records", {"kind": "hypothesis", "text": "fold 2 leaks"})
    assert note.status_code == 201, note.content
    _create(lab)
    assert lab.owner.post(f"/runs/{lab.run.pk}/share-links/{ShareLink.objects.get().pk}/revoke").status_code == 200

    rows = list(AuditEntry.objects.order_by("created", "pk"))
    assert [(r.actor, r.action) for r in rows] == [
        ("user:rex", "decision"), ("user:rex", "edit"), ("user:rex", "control"), ("user:rex", "start"),
        ("user:olive", "members"), ("user:olive", "members"), ("user:olive", "members"), ("user:rex", "note"),
        ("user:olive", "share_created"), ("user:olive", "share_revoked")]
    assert all(r.project == lab.project for r in rows)
    decision, edit, control, start = rows[:4]
    assert decision.detail == {"mutation": lab.mutation.pk, "decision": "approved", "reason": "fine"}
    assert decision.run == lab.run and edit.detail["version"] == 2 and control.detail["control"] == "pause"
    assert start.run == Run.objects.latest("pk") and start.detail["new_project"] is False
    assert [r.detail["change"] for r in rows[4:7]] == ["add", "role", "remove"]
    assert rows[4].detail["member"] == "newton" and rows[7].detail["kind"] == "hypothesis"
    assert rows[8].detail["link"] == rows[9].detail["link"] == ShareLink.objects.get().pk
