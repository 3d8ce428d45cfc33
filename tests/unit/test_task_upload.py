"""A person adds their own task in the studio: a zip of its folder uploaded, or a folder on the
server registered; checked by the engine's loader and preflight, with every problem on the page."""
from __future__ import annotations

import io
import shutil
import zipfile
from pathlib import Path

import pytest
from django.test import Client

from tests.studio_harness import add_member
from webapp.tasks.models import Task
from webapp.teams.models import AuditEntry, Project

pytestmark = pytest.mark.django_db(transaction=True)


def zipped(folder: Path, top: str | None = "my-task") -> io.BytesIO:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as z:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                name = path.relative_to(folder).as_posix()
                z.write(path, f"{top}/{name}" if top else name)
    buffer.seek(0)
    buffer.name = "my-task.zip"
    return buffer


@pytest.fixture
def client(demo_user) -> Client:
    c = Client()
    c.force_login(demo_user)
    return c


def test_an_uploaded_task_folder_is_checked_registered_and_offered_in_the_run_form(client, light_task, settings):
    page = client.post("/tasks/new", {"project": "My lab", "archive": zipped(light_task)})
    assert page.status_code == 302, page.content.decode()[:2000]
    task = Task.objects.get(project__name="My lab")
    assert task.name == "my-task" and Path(settings.TRELLIS_TASKS_DIR) in Path(task.folder).parents
    assert (Path(task.folder) / "Problem.md").exists() and not (Path(task.folder) / "my-task").exists()
    assert AuditEntry.objects.filter(action="task", project=task.project).exists()
    home = client.get(page["Location"]).content.decode()
    # offered under its project, and chosen already
    assert f'<optgroup label="My lab">' in home and f'value="{task.folder}" selected' in home


def test_a_broken_task_is_refused_with_every_problem_and_nothing_is_kept(client, light_task, settings, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(light_task, broken)
    (broken / "data" / "train.csv").write_text("id,x,y\n1,0.5,oops\n2,0.7,\n")  # a target that is not a number
    before = set(Path(settings.TRELLIS_TASKS_DIR).glob("*")) if Path(settings.TRELLIS_TASKS_DIR).exists() else set()
    page = client.post("/tasks/new", {"project": "My lab", "archive": zipped(broken)})
    html = page.content.decode()
    assert page.status_code == 422 and "The task was not added" in html and 'id="task-problems"' in html
    assert not Task.objects.exists()
    assert set(Path(settings.TRELLIS_TASKS_DIR).glob("*")) == before  # the unpacked folder is gone


@pytest.mark.parametrize("content, says", [
    (b"not a zip at all", "is not a zip file"),
])
def test_an_upload_that_is_not_a_zip_says_so(client, content, says):
    upload = io.BytesIO(content)
    upload.name = "data.csv"
    page = client.post("/tasks/new", {"project": "My lab", "archive": upload})
    assert page.status_code == 422 and says in page.content.decode()


def test_a_server_folder_registers_only_under_the_allowed_roots(client, light_task, settings, tmp_path):
    settings.TRELLIS_TASK_ROOTS = [light_task.parent]
    page = client.post("/tasks/new", {"project": "My lab", "path": str(light_task)})
    assert page.status_code == 302 and Task.objects.get().folder == str(light_task.resolve())
    outside = client.post("/tasks/new", {"project": "My lab", "path": "/etc"})
    assert outside.status_code == 422 and "outside the folders tasks may be registered from" in outside.content.decode()
    both = client.post("/tasks/new", {"project": "My lab"})
    assert both.status_code == 422 and "one of the two" in both.content.decode()


def test_someone_elses_project_takes_no_task_from_you(client, light_task, django_user_model):
    owner = django_user_model.objects.create_user("grace", password="x" * 12)
    project = Project.objects.create(name="Theirs")
    add_member(project, owner, "owner")
    page = client.post("/tasks/new", {"project": "Theirs", "archive": zipped(light_task)})
    assert page.status_code == 422 and "needs its reviewer role" in page.content.decode()
    assert not Task.objects.exists()
