"""The studio's side of the Evaluator (issue 27 item 3): a task zip without evaluate.py shows the
drafted one for a person to read; approving that very draft adds the task, rejecting keeps nothing."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from django.test import Client

from tests.unit.test_task_upload import zipped
from webapp.tasks.models import Task
from webapp.teams.models import AuditEntry

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def client(demo_user) -> Client:
    c = Client()
    c.force_login(demo_user)
    return c


@pytest.fixture
def no_evaluator(light_task, tmp_path) -> Path:
    folder = tmp_path / "my-task"
    shutil.copytree(light_task, folder)
    (folder / "evaluate.py").unlink()
    return folder


def _shown(html: str) -> tuple[str, str]:
    folder = re.search(r'name="folder" value="([^"]+)"', html).group(1)
    sha = re.search(r'name="sha" value="([0-9a-f]{64})"', html).group(1)
    return folder, sha


def test_an_upload_without_evaluate_py_shows_the_draft_and_approval_adds_the_task(client, no_evaluator):
    page = client.post("/tasks/new", {"project": "My lab", "archive": zipped(no_evaluator)})
    html = page.content.decode()
    assert page.status_code == 200 and "read the one drafted for it" in html
    assert "def score(pred, true)" in html and "passed: the answer key scored against itself" in html
    assert not Task.objects.exists()  # nothing is added before a person approves
    folder, sha = _shown(html)
    assert (Path(folder) / "evaluate.draft.py").exists() and not (Path(folder) / "evaluate.py").exists()

    done = client.post("/tasks/approve-evaluator", {"folder": folder, "project": "My lab", "sha": sha,
                                                    "decision": "approve"})
    assert done.status_code == 302, done.content.decode()[:2000]
    task = Task.objects.get(project__name="My lab")
    assert (Path(task.folder) / "evaluate.py").read_text().startswith('"""Score predictions.csv')
    assert AuditEntry.objects.filter(action="evaluator_approved", project=task.project).exists()


def test_a_rejected_draft_keeps_nothing_and_a_stale_hash_adds_nothing(client, no_evaluator, settings):
    html = client.post("/tasks/new", {"project": "My lab", "archive": zipped(no_evaluator)}).content.decode()
    folder, sha = _shown(html)
    stale = client.post("/tasks/approve-evaluator", {"folder": folder, "project": "My lab", "sha": "0" * 64,
                                                     "decision": "approve"})
    assert stale.status_code == 422 and "read it again before you approve it" in stale.content.decode()
    assert not Task.objects.exists() and not (Path(folder) / "evaluate.py").exists()
    client.post("/tasks/approve-evaluator", {"folder": folder, "project": "My lab", "sha": sha, "decision": "reject"})
    assert not Path(folder).exists() and not Task.objects.exists()


def test_approval_is_refused_for_a_folder_that_is_no_waiting_task(client, tmp_path):
    elsewhere = tmp_path / "x"
    elsewhere.mkdir()
    (elsewhere / "evaluate.draft.py").write_text("print('hi')\n")
    page = client.post("/tasks/approve-evaluator", {"folder": str(elsewhere), "project": "P", "sha": "a" * 64,
                                                    "decision": "approve"})
    assert page.status_code == 404 and not (elsewhere / "evaluate.py").exists()
