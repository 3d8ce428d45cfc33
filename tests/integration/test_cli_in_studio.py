"""A run started from the command line with --project is a studio run: its events, versions and
result are on its page, and its project is the person's."""
from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from webapp.runs.models import Run, RunStatus
from webapp.teams.models import Membership

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_manage_evolve_with_a_project_records_the_run_where_the_studio_shows_it(light_task, demo_user):
    out = io.StringIO()
    call_command("evolve", str(light_task), "--project", "Bench", "--user", "ada", "--iterations", "1",
                 "--no-single-agent", "--no-archive", stdout=out)
    run = Run.objects.get(task__project__name="Bench")
    said = out.getvalue()
    assert "recording in the studio: project 'Bench'" in said and f"run {run.pk}: completed" in said
    assert "iteration 1" in said or "iter" in said  # the search's own progress lines
    assert run.status == RunStatus.COMPLETED and run.created_by == demo_user
    assert run.result["final"]["official"]["ok"] and run.events.filter(kind="search_finished").exists()
    assert run.versions.exists() and run.gate_policy == "automatic"
    assert Membership.objects.get(project=run.task.project).user == demo_user
    client = Client()
    client.force_login(demo_user)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert "Completed" in page or "completed" in page
    assert f"Run {run.pk}" in client.get("/").content.decode()


def test_manage_evolve_names_a_missing_user_and_a_broken_task(light_task, tmp_path):
    with pytest.raises(CommandError, match="no studio user 'nobody'"):
        call_command("evolve", str(light_task), "--project", "Bench", "--user", "nobody", stdout=io.StringIO())
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "Problem.md").write_text("")
    with pytest.raises(CommandError):
        call_command("evolve", str(broken), "--project", "Bench", stdout=io.StringIO())
    assert not Run.objects.exists()


def test_manage_run_task_with_a_project_records_one_run_of_the_team_in_the_studio(light_task, demo_user):
    """Issue 26 item 5: run_task's runs appear in the studio too, as the team as it is (no search)."""
    out = io.StringIO()
    call_command("run_task", str(light_task), "--project", "Once", "--user", "ada", "--no-single-agent",
                 stdout=out)
    run = Run.objects.get(task__project__name="Once")
    assert f"run {run.pk}: completed" in out.getvalue()
    # issue 37 item 12: it said "stopped: run budget reached" after 17k of 2M tokens
    assert "budget reached" not in out.getvalue() and "it ran once; no further run was asked for" in out.getvalue()
    assert run.search == "fixed" and run.iterations == 0 and run.get_search_display() == "The team as it is (no search)"
    assert run.result["final"]["official"]["ok"] and run.created_by == demo_user
    assert run.versions.count() == 1  # the team, never changed
    assert run.events.filter(kind="run_started").count() == 1  # one run of it
    with pytest.raises(CommandError, match="drop --workflow"):
        call_command("run_task", str(light_task), "--project", "Once", "--workflow", "single", stdout=io.StringIO())
