"""The home page's runs table (issue 26 item 7): a page of 25 runs per task with the official
metric, the best baseline, the single agent and the cost, read by the database out of the runs'
JSON; the home page's queries do not grow with the number of runs."""
from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.studio_harness import add_member
from webapp.runs.models import Run, RunStatus
from webapp.runs.runs_table import PAGE_SIZE, runs_page
from webapp.tasks.models import Task
from webapp.teams.models import Project

pytestmark = pytest.mark.django_db


def _result(final: float, baselines: dict) -> dict:
    return {"initial": {"official": {"ok": True, "value": final * 2}}, "final": {"official": {"ok": True, "value": final}},
            "baselines": {name: {"ok": True, "value": v} for name, v in baselines.items()},
            "hindsight": {"candidates": [{"label": f"c{k}", "official": 0.1} for k in range(200)]}}


@pytest.fixture
def task(demo_user):
    project = Project.objects.create(name="Table")
    add_member(project, "ada", "owner")
    return Task.objects.create(project=project, name="t", folder="/nonexistent", metric_name="rmse", higher_is_better=False)


def test_each_row_has_the_official_metric_best_baseline_single_agent_and_cost(task):
    run = Run.objects.create(task=task, status=RunStatus.COMPLETED, usage={"tokens": 12345, "cost_usd": 0.25},
                             result=_result(0.2, {"constant": 0.9, "nearest_neighbour": 0.5, "single_agent": 0.3}))
    failed = Run.objects.create(task=task, status=RunStatus.FAILED,
                                result={"final": {"official": {"ok": False, "error": "no predictions.csv"}}})
    rows = {r.pk: r for r in runs_page(task, 1).object_list}
    row = rows[run.pk]
    assert row.final.value == 0.2 and row.initial.value == 0.4 and row.solo.value == 0.3
    assert (row.best_baseline.name, row.best_baseline.value) == ("nearest_neighbour", 0.5)  # lower is better
    assert row.cost_usd == 0.25 and row.tokens_text == "12,345"
    assert rows[failed.pk].final.value is None and "no predictions.csv" in rows[failed.pk].final.error


def test_the_home_page_shows_a_page_of_runs_with_queries_that_do_not_grow(client, demo_user, task):
    client.force_login(demo_user)
    Run.objects.bulk_create([Run(task=task, status=RunStatus.COMPLETED, result=_result(0.2, {"constant": 0.9}))
                             for _ in range(5)])
    with CaptureQueriesContext(connection) as few:
        assert client.get("/").status_code == 200
    Run.objects.bulk_create([Run(task=task, status=RunStatus.COMPLETED, result=_result(0.2, {"constant": 0.9}))
                             for _ in range(200)])
    with CaptureQueriesContext(connection) as many:
        page = client.get("/").content.decode()
    assert len(many.captured_queries) <= len(few.captured_queries) + 2
    assert page.count('name="runs"') == PAGE_SIZE and "runs 1–25 of 205" in page
    # the whole result (a hindsight of every candidate) is never read for the table, only its figures
    import re

    assert not any(re.search(r'(?<!\()"runs_run"\."result"', q["sql"]) for q in many.captured_queries)
    older = client.get(f"/tasks/{task.pk}/runs?page=9").content.decode()
    assert "runs 201–205 of 205" in older and older.count('name="runs"') == 5
