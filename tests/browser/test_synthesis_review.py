"""A person starts a run from a synthesized workflow with the review search, in Chromium: the run
page shows what each role was given from the library (on the graph's nodes, in the synthesis
panel, in an agent's detail), the review's repair of the implicated node waits in the queue, the
person approves it and the run completes; the library page lists and filters what synthesis
drew on."""
from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser.test_browser import PROBE_MS, _open_run, _pending_mutation
from tests.studio_harness import add_member
from webapp.runs import controls
from webapp.runs.models import GatePolicy
from webapp.tasks import registration
from webapp.teams.models import Project

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_a_synthesized_runs_repair_waits_for_a_person_and_the_library_is_browsable(page, light_task):
    project = Project.objects.create(name="Browser tests")
    add_member(project, "ada", "owner")
    # discontinuous-1d: the shipped library's closest planner skill is about extrapolation, which this
    # task does not need; the plan it steers to is worse than the nearest neighbour, so the review
    # implicates the planner
    run = controls.start_run(registration.task_for_folder(project, light_task), search="repair", start="synthesized",
                             iterations=1, gate_policy=GatePolicy.MANUAL, single_agent=False)
    _open_run(page, run)
    waiting = _pending_mutation(page)
    expect(waiting).to_contain_text("attachment change")
    expect(waiting).to_contain_text("on planner")
    expect(waiting).to_contain_text("beats_trivial failed")
    search = page.locator("#search-panels")
    expect(search).to_contain_text("Synthesized from the library")
    expect(search).to_contain_text("the best-fitting planner skill")
    labels = page.evaluate("() => document.getElementById('dag')._cyreg.cy.nodes().map((n) => n.data('label'))")
    assert any("skill" in label for label in labels), labels
    page.locator("#agent-buttons").get_by_role("button", name="planner").click()
    detail = page.locator("#agent-detail .agent-detail")
    expect(detail).to_have_attribute("data-agent", "planner")
    expect(detail.locator("h4").filter(has_text="From the library:").first).to_be_visible()
    page.shot("1-repair-waiting")

    waiting.get_by_role("button", name="Approve").click()
    expect(waiting).to_contain_text("approved by user:ada")
    expect(page.locator("#run-status")).to_have_attribute("data-status", "completed", timeout=PROBE_MS)
    expect(search).to_contain_text("repaired")
    page.shot("2-completed")

    page.get_by_role("link", name="Library").click()
    expect(page.get_by_role("heading", name="Library")).to_be_visible()
    page.get_by_label("Kind").select_option("skill")
    page.get_by_label("Words").fill("series")
    page.get_by_role("button", name="Filter").click()
    expect(page.locator("table.runs")).to_contain_text("Profile each series before forecasting")
    expect(page.locator("table.runs")).not_to_contain_text("Fix the cause a traceback names")
    page.shot("3-library")
