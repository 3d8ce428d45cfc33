"""The studio in a real browser: Playwright drives Debian's Chromium against a running studio
(Daphne, a Celery worker, embedded Redis) and checks what a scientist sees and does: starting
a run, watching agents run live, deciding mutations, editing the workflow, reading the trace.
Screenshots of each key moment land in test-artifacts/screenshots/."""
from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.studio_harness import add_member, wait_for
from webapp.runs import controls
from webapp.runs.models import GatePolicy, Run
from webapp.runs.presenters import PAGE_CHARS, paged_payload
from webapp.tasks import registration
from webapp.teams.models import Project

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PROBE_MS = 240_000  # a probe takes 10-20 s on a small machine; leave room for a slow one




def _start(light_task, **options) -> Run:
    project = Project.objects.create(name="Browser tests")
    add_member(project, "ada", "owner")  # the signed-in person (demo_user)
    task = registration.task_for_folder(project, light_task)
    return controls.start_run(task, search="mimosa", gate_policy=GatePolicy.MANUAL, **options)


def _open_run(page: Page, run: Run) -> None:
    page.goto(f"/runs/{run.pk}/")
    expect(page.locator("#ws-state")).to_have_text("live")


def _pending_mutation(page: Page):
    """The mutation waiting for a person, found by its stable id (the queue re-renders)."""
    waiting = page.locator("#queue article.mutation.m-proposed")
    expect(waiting).to_have_count(1, timeout=PROBE_MS)
    return page.locator("#" + waiting.get_attribute("id"))


def test_start_a_run_from_the_home_page_and_watch_agents_run_live(page):
    page.get_by_label("Project").fill("Browser project")
    page.get_by_label("Task").select_option(label="discontinuous-1d")
    page.get_by_label("Search").select_option("mimosa")
    page.get_by_label("Gate").select_option(label="Every mutation waits for a person")
    page.get_by_label("Iterations").fill("2")
    page.shot("1-form")
    page.get_by_role("button", name="Start run").click()

    expect(page).to_have_url(re.compile(r"/runs/\d+/$"))
    expect(page.get_by_role("heading", level=1)).to_contain_text("Run")
    page.evaluate("window.__marker = 1")  # gone if anything reloads the page
    states = page.locator("#dag-states li")
    expect(states.first).to_be_attached(timeout=PROBE_MS)  # the graph is drawn
    running = page.locator("#dag-states li[data-state=running]").first
    expect(running).to_be_attached(timeout=PROBE_MS)
    page.shot("2-running")
    agent = page.locator("#" + running.get_attribute("id"))
    expect(agent).to_have_attribute("data-state", "done", timeout=PROBE_MS)  # the same node, live
    expect(page.locator("#ws-state")).to_have_text("live")
    expect(page.locator("#run-status")).to_have_attribute("data-status", re.compile("running|awaiting_decision"))
    assert page.evaluate("window.__marker") == 1, "the run page reloaded itself"
    page.shot("3-done")


def test_a_scimars_run_page_shows_each_editors_proposal_and_the_composition(page, light_task):
    project = Project.objects.create(name="Browser tests")
    add_member(project, "ada", "owner")
    run = controls.start_run(registration.task_for_folder(project, light_task), search="scimars", iterations=1,
                             gate_policy=GatePolicy.AUTOMATIC, single_agent=False)
    _open_run(page, run)
    search = page.locator("#search-panels")
    expect(search.locator(".sgroup h4").filter(has_text="Round 1")).to_have_count(1, timeout=PROBE_MS)
    expect(search.locator(".scard").filter(has_text="composer:")).to_have_count(1, timeout=PROBE_MS)
    # each editor's proposal, probed against the round's reference, or why it had none
    editors = search.locator(".scard").filter(has_text=re.compile(r"_editor: "))
    expect(editors.first).to_be_attached()
    assert editors.count() >= 2
    expect(search.locator(".search-chart")).to_have_count(1)
    expect(page.locator("#chart-j")).to_have_count(0)  # no judge: no empty judge charts
    expect(page.locator("#run-status")).to_have_attribute("data-status", "completed", timeout=PROBE_MS)
    expect(search.locator(".scard").filter(has_text="lessons")).to_have_count(1)
    search.scroll_into_view_if_needed()
    # drawn as one figure: Plotly's layers stacked in place (an htmx settle once stripped its class)
    expect(search.locator(".search-chart.js-plotly-plot")).to_have_count(1)
    page.shot("scimars-round")


def test_approve_one_mutation_veto_another_and_see_the_run_complete(page, light_task):
    run = _start(light_task, iterations=2)
    _open_run(page, run)
    page.evaluate("window.__marker = 1")

    first = _pending_mutation(page)
    expect(page.locator("#run-status")).to_have_attribute("data-status", "awaiting_decision")
    page.shot("1-first-pending")
    first.get_by_placeholder("Reason (optional)").fill("clearer procedure")
    first.get_by_role("button", name="Approve").click()
    expect(first).to_contain_text("approved by user:ada")
    # Mimosa presents itself: J per iteration and each iteration's decision, by whom
    search = page.locator("#search-panels")
    expect(search.locator(".scard").filter(has_text="decided by ada: clearer procedure")).to_have_count(1)
    expect(search.locator(".search-chart .main-svg").first).to_be_attached()
    v2 = page.locator("#timeline li").filter(has_text="v2")
    expect(v2).to_contain_text("user:ada")
    expect(page.locator("#dag-label")).to_contain_text("v2")
    expect(page.locator("#diff table.sbs").first).to_contain_text("v2 · user:ada")
    page.shot("2-approved")

    second = _pending_mutation(page)
    expect(second).to_contain_text("Iteration 2")
    second.get_by_placeholder("Reason (optional)").fill("not convinced")
    second.get_by_role("button", name="Veto").click()
    expect(second).to_contain_text("vetoed by user:ada")
    expect(second).to_contain_text("not convinced")
    page.shot("3-vetoed")

    expect(page.locator("#run-status")).to_have_attribute("data-status", "completed", timeout=PROBE_MS)
    official = page.locator("table.official")
    expect(official).to_contain_text("Official metric")
    # initial and final, the two trivial baselines and the single agent beside them
    expect(official.locator("tbody tr")).to_have_count(5)
    expect(official).to_contain_text("final")
    expect(official.locator("tr.baseline")).to_have_count(3)
    expect(official).to_contain_text("baseline: nearest neighbour")
    expect(official.locator("tr.baseline").filter(has_text="single agent")).to_contain_text("same budget")
    # the final team's lead over each baseline, and whether it is beyond the test set's noise
    expect(official.locator("thead")).to_contain_text("final team's lead, 95 % interval")
    expect(official.locator("tr.baseline").filter(has_text="single agent").locator("td").last).to_contain_text(
        re.compile(r"within noise|better|worse|same predictions"))
    expect(official.locator("tfoot")).to_contain_text("paired bootstrap")
    # the hindsight: how J and validation ranked the probed candidates against the official metric
    hindsight = page.locator("table.hindsight")
    expect(hindsight).to_contain_text("probed candidate")
    expect(hindsight.locator("tbody tr")).to_have_count(3)
    expect(hindsight).to_contain_text("validation ~ official")
    expect(page.locator("#timeline li")).to_have_count(2)  # the veto left no v3
    expect(page.locator("#timeline")).not_to_contain_text("v3")
    assert page.evaluate("window.__marker") == 1, "the run page reloaded itself"
    page.shot("4-completed")


def test_editor_refuses_bad_contracts_and_cycles_and_saves_a_procedure(page, light_task):
    run = _start(light_task, iterations=1)
    wait_for(lambda: run.versions.exists(), 120, what="the run's first version")
    _open_run(page, run)
    editor = page.locator("#editor")
    timeline = page.locator("#timeline li")
    expect(timeline).to_have_count(1)

    editor.locator("#contract-type").fill("list[")
    editor.get_by_role("button", name="Save contract").click()
    errors = editor.locator("#edit-errors")
    expect(errors).to_contain_text("Not saved")
    expect(errors).to_contain_text("list[")
    expect(editor.locator("#contract-type")).to_have_value("list[")  # kept, to correct it
    page.shot("1-bad-contract")

    editor.locator("#rewire-edge").select_option("debugger->finalizer:code")
    expect(editor.locator("#rewire-source")).to_have_value("debugger")  # the form follows the edge
    editor.locator("#rewire-source").select_option("finalizer")
    editor.locator("#rewire-target").select_option("analyzer")
    editor.get_by_role("button", name="Save edge").click()
    expect(errors).to_contain_text(re.compile("cycle", re.I))
    expect(editor.locator("#rewire-source")).to_have_value("finalizer")
    page.shot("2-cycle")
    expect(timeline).to_have_count(1)  # neither refused edit made a version

    role = editor.locator("#procedure-role").input_value()
    editor.locator("#procedure-text").fill(f"{role}: state the validation score before anything else.")
    editor.get_by_role("form", name="Edit a role procedure").get_by_label("Why").fill("scores first")
    editor.get_by_role("button", name="Save procedure").click()
    expect(editor.locator("#edit-saved")).to_contain_text("Saved as v2")
    expect(timeline).to_have_count(2)
    expect(timeline.filter(has_text="v2")).to_contain_text("user:ada")
    page.shot("3-saved")

    # a role's memory policy: choosing the role fills its fields; a bad kind is refused, a good edit saved
    memory = editor.get_by_role("form", name="Edit a role's memory policy")
    memory.locator("#memory-role").select_option("planner")
    expect(memory.locator("#memory-retrieves")).to_have_value(re.compile("check_result"))
    memory.locator("#memory-retrieves").fill("check_result, gossip")
    memory.get_by_role("button", name="Save memory policy").click()
    expect(errors).to_contain_text("unknown record kind")
    memory = editor.get_by_role("form", name="Edit a role's memory policy")
    memory.locator("#memory-role").select_option("planner")
    memory.locator("#memory-retrieves").fill("check_result, note")
    memory.locator("#memory-limit").fill("3")
    memory.get_by_role("button", name="Save memory policy").click()
    expect(editor.locator("#edit-saved")).to_contain_text("Saved as v3")
    expect(timeline).to_have_count(3)
    page.shot("4-memory-saved")


def _long_model_call(run: Run):
    """A model call with a field longer than one page, and that field's path."""
    for event in run.events.filter(kind="model_call"):
        for item in paged_payload(event, None, 1)["items"]:
            if item["chars"] > PAGE_CHARS:
                return event, item
    return None


def test_trace_viewer_filters_opens_details_and_pages_a_long_field(page, light_task):
    run = _start(light_task, iterations=1)
    event, item = wait_for(lambda: _long_model_call(run), 180, what="a model call with a long field")
    page.goto(f"/runs/{run.pk}/trace")
    rows = page.locator("#trace-rows")
    expect(rows).to_contain_text("agent_started")
    page.get_by_label("Kind").select_option("model_call")
    expect(page).to_have_url(re.compile(r"kind=model_call"))
    expect(rows.locator("tbody tr:not(.detail) td:nth-child(4)").first).to_have_text("model_call")
    expect(rows).not_to_contain_text("agent_started")
    page.shot("1-filtered")

    row = rows.locator("tbody tr:not(.detail)").filter(has=page.locator(f"td:first-child:text-is('{event.seq}')"))
    row.get_by_role("button", name="details").click()
    detail = page.locator(f"#ev-{event.seq}")
    expect(detail.locator("dt").filter(has_text=item["path"]).first).to_be_visible()
    page.shot("2-details")

    pages = -(-item["chars"] // PAGE_CHARS)
    item_buttons = detail.get_by_role("button", name=re.compile("read all")).count()
    detail.get_by_role("button", name=f"read all {item['chars']} characters, a page at a time").first.click()
    field = detail.locator(".field-page")
    expect(field).to_contain_text(f"page 1 of {pages}")
    expect(detail.get_by_role("button", name=re.compile("read all"))).to_have_count(item_buttons - 1)
    field.get_by_role("button", name="next page").click()
    expect(field).to_contain_text(f"page 2 of {pages}")
    expect(field.get_by_role("button", name="previous page")).to_be_visible()
    page.shot("3-paged")
