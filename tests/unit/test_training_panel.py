"""The run page's Training panel on the database and a run folder alone (no worker): the job
list (device, progress, ETA, best validation, curve) and Pause / Cancel / Resume, which only a
reviewer (or owner) may press, are audited, and are refused through a share link."""
from __future__ import annotations

import time
from pathlib import Path

import pytest
from django.test import Client

from engine.training.folder import JobFolder, JobState
from engine.training.remote import Ticket
from tests.studio_harness import add_member, running_run
from webapp.runs import sharing
from webapp.runs.models import Run
from webapp.teams.models import AuditEntry

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def run(examples, tmp_path) -> Run:
    run = running_run(examples / "diabetes-progression", "training panel")
    run.run_dir = str(tmp_path / "run")
    run.save(update_fields=["run_dir"])
    return run


def _job(run: Run, key: str, status: str = "running", epoch: int = 4, epochs: int = 10) -> JobFolder:
    folder = JobFolder(Path(run.run_dir) / "training", key)
    folder.save(JobState(key, purpose="in-loop validation", node="n2", status=status, device="cpu",
                         started=time.time(), epoch=epoch, epochs=epochs, best_val=0.25, eta_s=12.5,
                         checkpoint={"name": "checkpoint.pt", "sha256": "a" * 64, "bytes": 10, "epoch": epoch},
                         points=[{"t": i, "epoch": i, "loss": 1.0 / (i + 1), "val": 1.2 / (i + 1)}
                                 for i in range(epoch + 1)]))
    return folder


def _client(user) -> Client:
    c = Client()
    c.force_login(user)
    return c


def _member(run, username: str, role: str):
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.create_user(username, password="pw-" + username)
    add_member(run.task.project, user, role)
    return user


def test_the_job_list_shows_progress_eta_best_validation_and_the_curve(run):
    _job(run, "abc123", epoch=4, epochs=10)
    viewer = _member(run, "vic", "viewer")
    data = _client(viewer).get(f"/runs/{run.pk}/training.json").json()
    job, = data["jobs"]
    assert (job["job"], job["node"], job["device"], job["status"]) == ("abc123", "n2", "cpu", "running")
    assert job["progress"] == 0.5 and job["eta_s"] == 12.5 and job["best_val"] == 0.25
    assert [p["epoch"] for p in job["points"]] == [0, 1, 2, 3, 4]
    assert job["can"] == {"pause": True, "cancel": True, "resume": False}
    assert data["can_control"] is False  # a viewer sees the buttons' state, not the buttons


def test_a_reviewer_pauses_resumes_and_cancels_a_job_and_each_is_audited(run, monkeypatch):
    folder = _job(run, "abc123")
    reviewer = _client(_member(run, "rev", "reviewer"))
    url = f"/runs/{run.pk}/training/abc123/"

    assert reviewer.post(url + "pause").status_code == 200
    assert folder.command() == "pause"
    assert reviewer.post(url + "pause").status_code == 409  # asked already
    folder.save(JobState(**{**folder.load().to_dict(), "status": "paused"}))  # the job stopped

    # A run waits on it through a ticket: resume clears the command and sends the ticket again.
    ticket = Ticket.new(folder)
    ticket.spec_file.write_text('{"ticket": "%s", "root": "r", "key": "abc123"}' % ticket.id)
    sent = []
    monkeypatch.setattr("webapp.runs.training.send", sent.append)  # the training queue
    answer = reviewer.post(url + "resume")
    assert answer.status_code == 200 and "last checkpoint" in answer.json()["message"]
    assert folder.command() is None and [s["ticket"] for s in sent] == [ticket.id]

    assert reviewer.post(url + "cancel").status_code == 200
    assert folder.command() == "cancel"
    actions = list(AuditEntry.objects.filter(run=run, action="control").order_by("created")
                   .values_list("detail", flat=True))
    assert [(a["control"], a["job"]) for a in actions] == [("training pause", "abc123"), ("training resume", "abc123"),
                                                            ("training cancel", "abc123")]


def test_a_finished_job_is_not_controlled_and_an_unknown_one_is_not_found(run):
    folder = _job(run, "done1", status="ok", epoch=9)
    reviewer = _client(_member(run, "rev", "reviewer"))
    refused = reviewer.post(f"/runs/{run.pk}/training/done1/pause")
    assert refused.status_code == 409 and "ok" in refused.json()["error"]
    assert reviewer.post(f"/runs/{run.pk}/training/done1/resume").status_code == 409
    assert folder.command() is None
    assert reviewer.post(f"/runs/{run.pk}/training/nope/pause").status_code == 404
    assert reviewer.post(f"/runs/{run.pk}/training/..%2F..%2Fetc/pause").status_code == 404
    assert reviewer.post(f"/runs/{run.pk}/training/done1/explode").status_code == 404


def test_viewers_annotators_and_share_links_cannot_control_a_job(run):
    folder = _job(run, "abc123")
    for username, role in (("vic", "viewer"), ("ann", "annotator")):
        assert _client(_member(run, username, role)).post(f"/runs/{run.pk}/training/abc123/cancel").status_code == 403
    owner = _member(run, "own", "owner")
    signed = sharing.sign(sharing.create(run, owner, "1d"))
    guest = Client()
    assert guest.get(f"/share/{signed}/training.json").json()["jobs"][0]["job"] == "abc123"
    assert guest.post(f"/share/{signed}/training/abc123/cancel").status_code == 403
    assert folder.command() is None
    assert not AuditEntry.objects.filter(run=run, action="control").exists()


def test_the_run_page_carries_the_training_panel(run):
    _job(run, "abc123")
    reviewer = _client(_member(run, "rev", "reviewer"))
    page = reviewer.get(f"/runs/{run.pk}/").content.decode()
    assert 'id="training-panel"' in page and "js/training.js" in page
    assert f'data-jobs="/runs/{run.pk}/training.json"' in page
    assert f'data-control="/runs/{run.pk}/training/JOB/ACTION"' in page


def test_a_cancelled_job_no_run_waits_on_resumes_alone_on_a_training_worker(run, monkeypatch, tmp_path):
    from engine.sandbox import ExecutionRequest
    from engine.sandbox.subprocess_executor import SubprocessExecutor

    folder = _job(run, "abc123", status="cancelled")
    data = tmp_path / "train.csv"
    data.write_text("x,y\n1,2\n")
    assert folder.keep_request(ExecutionRequest(code="import trellis_train", input_files={"data/train.csv": data}),
                               SubprocessExecutor(tmp_path / "sandboxes"))
    data.unlink()  # a validation fold's files vanish with the fold: the job kept its own copy
    folder.send("cancel")
    reviewer = _client(_member(run, "rev", "reviewer"))
    job = reviewer.get(f"/runs/{run.pk}/training.json").json()["jobs"][0]
    assert job["can"]["resume"] and not job["waited_on"]

    monkeypatch.setattr("webapp.health.live_training_slots", lambda: 0)
    refused = reviewer.post(f"/runs/{run.pk}/training/abc123/resume")
    assert refused.status_code == 503 and "training worker" in refused.json()["error"]
    assert folder.command() == "cancel"  # nothing changed

    sent = []
    monkeypatch.setattr("webapp.health.live_training_slots", lambda: 1)
    monkeypatch.setattr("webapp.runs.training.send", sent.append)
    answer = reviewer.post(f"/runs/{run.pk}/training/abc123/resume")
    assert answer.status_code == 200 and "no run waits on it" in answer.json()["message"]
    spec, = sent
    assert spec["alone"] and spec["run"] == run.pk and spec["key"] == "abc123"
    assert Path(spec["request"]["input_files"]["data/train.csv"]).read_text() == "x,y\n1,2\n"
    assert folder.command() is None
