"""A scientist brings their own task: uploads a zip of its folder in the studio, sees a broken one
refused with its problems, and runs the good one to its official score."""
from __future__ import annotations

import re
import shutil

import pytest
from playwright.sync_api import expect

from tests.unit.test_task_upload import zipped

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PROBE_MS = 240_000


def test_a_task_uploaded_through_the_studio_runs_to_its_official_score(page, light_task, tmp_path):
    broken = tmp_path / "broken-task"
    shutil.copytree(light_task, broken)
    (broken / "Problem.md").write_text("")  # no statement, no metric
    (tmp_path / "broken-task.zip").write_bytes(zipped(broken, "broken-task").getvalue())
    (tmp_path / "field-survey.zip").write_bytes(zipped(light_task, "field-survey").getvalue())

    page.goto("/")
    page.locator("#add-task-link").click()
    page.get_by_label("Project").fill("Field lab")
    page.get_by_label("Task folder as a zip").set_input_files(str(tmp_path / "broken-task.zip"))
    page.get_by_role("button", name="Check and add the task").click()
    expect(page.locator("#task-problems")).to_contain_text("The task was not added")
    page.shot("1-refused")

    page.get_by_label("Project").fill("Field lab")
    page.get_by_label("Task folder as a zip").set_input_files(str(tmp_path / "field-survey.zip"))
    page.get_by_role("button", name="Check and add the task").click()
    expect(page).to_have_url(re.compile(r"/\?task="))
    task = page.get_by_label("Task")
    expect(task.locator("option:checked")).to_have_text("field-survey")
    page.get_by_label("Project").fill("Field lab")
    page.get_by_label("Search").select_option("mimosa")
    page.get_by_label("Gate").select_option(label="Fully automatic (the search's rule decides)")
    page.get_by_label("Iterations").fill("1")
    page.get_by_label("Single-agent baseline").uncheck()
    page.shot("2-form")
    page.get_by_role("button", name="Start run").click()
    expect(page).to_have_url(re.compile(r"/runs/\d+/$"))
    expect(page.locator("#run-status")).to_have_attribute("data-status", "completed", timeout=PROBE_MS)
    official = page.locator("table.official")
    expect(official.locator("tbody tr").filter(has_text="final")).to_contain_text(re.compile(r"\d\.\d{4}"))
    expect(page.locator("h1")).to_contain_text("Run")
    # watched live to its end, the page draws the final's predictions against the held-out truth
    # without a reload (the end arrives as a pushed message, not an htmx swap)
    expect(page.locator("#predictions-card .predictions-note")).to_contain_text("held-out rows", timeout=15_000)
    page.shot("3-scored")


def test_a_task_without_evaluate_py_is_added_once_its_drafted_scorer_is_approved(page, light_task, tmp_path):
    folder = tmp_path / "no-scorer"
    shutil.copytree(light_task, folder)
    (folder / "evaluate.py").unlink()
    (tmp_path / "no-scorer.zip").write_bytes(zipped(folder, "no-scorer").getvalue())

    page.goto("/tasks/new")
    page.get_by_label("Project").fill("Field lab")
    page.get_by_label("Task folder as a zip").set_input_files(str(tmp_path / "no-scorer.zip"))
    page.get_by_role("button", name="Check and add the task").click()
    expect(page.get_by_role("heading", name=re.compile("read the one drafted for it"))).to_be_visible()
    expect(page.locator("#draft-source")).to_contain_text("def score(pred, true)")
    expect(page.locator(".evaluator-tests li.pass")).to_have_count(2)
    page.shot("1-draft")
    page.get_by_role("button", name="Approve and add the task").click()
    expect(page).to_have_url(re.compile(r"/\?task="))
    expect(page.get_by_label("Task").locator("option:checked")).to_have_text("no-scorer")
