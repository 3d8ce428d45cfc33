"""Issue 37, item 10: the heartbeat advanced only when an event was written, so a healthy run
between two events 60 s apart was shown "worker lost: resume to continue", and Resume would have
taken it from its worker. The worker now beats while it works, and Resume of a run whose
heartbeat is fresh is refused, even from a page read when it looked stale."""
from __future__ import annotations

import threading
import time

import pytest

from engine.errors import TrellisError
from tests.conftest import EXAMPLES
from webapp.runs import controls
from webapp.runs.models import Run, RunStatus
from webapp.tasks.models import Task
from webapp.teams.models import Project

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_quiet_healthy_run_keeps_its_worker(settings, monkeypatch):
    settings.TRELLIS_HEARTBEAT_STALE_S = 3
    task = Task.objects.create(project=Project.objects.create(name="P"), name="t",
                               folder=str(EXAMPLES / "discontinuous-1d"))
    run = Run.objects.create(task=task, status=RunStatus.QUEUED, lease="L", search="mimosa", iterations=1)
    seen: dict = {}
    quiet = threading.Event()

    def evolve(*args, **kwargs):  # a step that writes nothing for twice the stale time
        time.sleep(2.5)
        quiet.set()
        time.sleep(9)
        raise TrellisError("the step ended")

    monkeypatch.setattr("engine.evolve.evolve", evolve)
    monkeypatch.setattr(controls, "_publish", lambda run, lease: None)
    from webapp.runs.tasks import execute_run

    worker = threading.Thread(target=lambda: seen.update(status=execute_run(run.pk, "L")))
    worker.start()
    assert quiet.wait(20)
    time.sleep(2.5)  # now 5 s without an event: past the 3 s a heartbeat allows
    page_view = Run.objects.get(pk=run.pk)
    assert not page_view.worker_lost, "a healthy run was shown as worker lost"
    with pytest.raises(controls.ControlError):
        controls.resume_run(page_view)
    # a page read when the run did look lost: resume is refused once the worker has beaten since
    Run.objects.filter(pk=run.pk).update(heartbeat=None)
    stale_view = Run.objects.get(pk=run.pk)
    assert stale_view.worker_lost
    time.sleep(2)  # the worker beats
    assert Run.objects.get(pk=run.pk).status == RunStatus.RUNNING
    with pytest.raises(controls.ControlError, match="heartbeat is fresh"):
        controls.resume_run(stale_view)
    worker.join(30)
    assert seen["status"] == RunStatus.FAILED
    assert Run.objects.get(pk=run.pk).lease == "L"
