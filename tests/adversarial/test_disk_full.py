"""A full disk is said, not suffered (issue 26 item 12).

On the old studio a full disk surfaced as nothing: the worker could not record the failure, the
run showed "running" and then "worker lost", and neither a page nor /healthz said why. Here the
data disk is a real, small tmpfs filled to the top."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.skipif(os.uname().sysname != "Linux", reason="a tmpfs needs Linux"),
    pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small disk needs root"),
]
MB = 1024 * 1024


@pytest.fixture
def small_disk(tmp_path):
    """A 24 MB file system, unmounted after the test."""
    point = tmp_path / "disk"
    point.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "trellis-test-disk", str(point)], check=True)
    yield point
    subprocess.run(["umount", "-l", str(point)], check=False)


def _fill(folder: Path, leave_mb: float = 0) -> None:
    """Write until only ``leave_mb`` is left (0: until the kernel refuses)."""
    with open(folder / "filler.bin", "wb") as fh:
        try:
            while True:
                info = os.statvfs(folder)
                if leave_mb and info.f_bavail * info.f_frsize <= leave_mb * MB:
                    return
                fh.write(b"\0" * (256 * 1024))
                fh.flush()
        except OSError:
            return


@pytest.fixture
def studio_on(small_disk, settings):
    settings.VAR_DIR = small_disk
    settings.TRELLIS_RUNS_DIR = small_disk / "runs"
    settings.TRELLIS_ARCHIVE_DIR = small_disk / "archive"
    settings.TRELLIS_MIN_FREE_MB = 8
    settings.TRELLIS_DISK_RESERVE_MB = 4
    return small_disk


@pytest.mark.django_db
def test_healthz_and_every_page_say_the_disk_is_full_and_no_run_starts(studio_on, client, demo_user):
    from webapp.runs.models import Run

    _fill(studio_on, leave_mb=2)
    health = client.get("/healthz")
    assert health.status_code == 503
    body = json.loads(health.content)
    assert body["disk"] == "full" and body["disk_free_mb"] < 8 and body["ok"] is False
    client.force_login(demo_user)
    page = client.get("/")
    assert b"Disk full" in page.content and b"TRELLIS_MIN_FREE_MB" in page.content
    from webapp.runs.forms import example_choices

    response = client.post("/runs/new", {"project": "lab", "task_folder": example_choices()[0][0], "search": "mimosa",
                                         "iterations": 1, "seed": 0, "gate_policy": "manual", "max_tokens": 100_000,
                                         "executor": "subprocess"})
    assert response.status_code == 507 and b"Disk full" in response.content
    assert Run.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_a_run_queued_on_a_full_disk_is_paused_with_the_reason(studio_on, demo_user, examples):
    from webapp.runs.models import Run, RunStatus
    from webapp.runs.tasks import execute_run
    from webapp.tasks.models import Task
    from webapp.teams.models import Project

    _fill(studio_on, leave_mb=2)
    task = Task.objects.create(project=Project.objects.create(name="p"), name="d",
                               folder=str(examples / "discontinuous-1d"))
    run = Run.objects.create(task=task, status=RunStatus.QUEUED, lease="L", search="mimosa", iterations=1,
                             run_dir=str(studio_on / "runs" / "r1"), created_by=demo_user)
    assert execute_run(run.pk, "L") == RunStatus.PAUSED
    run.refresh_from_db()
    assert run.status == RunStatus.PAUSED and run.status_reason.startswith("Disk full")
    assert run.can_resume


@pytest.mark.django_db(transaction=True)
def test_a_disk_that_fills_during_a_run_pauses_it_says_why_and_gives_back_the_reserve(
        studio_on, demo_user, examples, monkeypatch):
    import engine.evolve
    from webapp.disk import reserve
    from webapp.runs.models import Run, RunStatus
    from webapp.runs.tasks import execute_run
    from webapp.tasks.models import Task
    from webapp.teams.models import Project

    assert reserve().ensure()
    task = Task.objects.create(project=Project.objects.create(name="p"), name="d",
                               folder=str(examples / "discontinuous-1d"))
    run = Run.objects.create(task=task, status=RunStatus.QUEUED, lease="L", search="mimosa", iterations=1,
                             run_dir=str(studio_on / "runs" / "r1"), created_by=demo_user)

    def evolve_that_fills_the_disk(folder, spec, *, run_dir, **_):  # what a run's traces and sandboxes do, faster
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        with open(Path(run_dir) / "trace.jsonl", "wb") as fh:
            while True:
                fh.write(b"{}\n" * 65536)
                fh.flush()

    monkeypatch.setattr(engine.evolve, "evolve", evolve_that_fills_the_disk)
    assert execute_run(run.pk, "L") == RunStatus.PAUSED
    run.refresh_from_db()
    assert run.status == RunStatus.PAUSED and run.status_reason.startswith("Disk full")
    assert "No space left on device" in run.status_reason and "resume" in run.status_reason
    assert not reserve().path.exists()  # given back, so the last writes had room
