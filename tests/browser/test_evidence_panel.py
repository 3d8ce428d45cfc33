"""The run page's evidence graph in a real browser (Playwright + Debian's Chromium against a
running studio: Daphne, a Celery worker, embedded Redis): a SciMARS + Memory run started from
the home page grows its evidence panel live, a reviewer adds a note linked to a record while it
runs, and the note reaches an agent: the next planner's memory_retrieval pushes it and the
planner's prompt holds its words. Screenshots land in test-artifacts/screenshots/."""
from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.studio_harness import add_member, wait_for
from webapp.runs import controls
from webapp.runs.models import Event, Run
from webapp.tasks import registration
from webapp.teams.models import Project

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

NOTE = "Try a piecewise fit with one break where the values jump"




def _records(page: Page) -> int:
    return int(page.locator("#evidence-panel").get_attribute("data-records"))


def _click_record(page: Page, record_id: int, kind: str) -> None:
    """Click a record where cytoscape drew it (a canvas: no element to click). The graph may
    be laid out again between reading the position and the click, as records arrive: then the
    click is repeated, as a person would."""
    graph = page.locator("#ev-graph")
    graph.scroll_into_view_if_needed()
    heading = page.locator("#ev-detail h3")
    for _ in range(10):
        box = graph.bounding_box()
        pos = page.evaluate(f"document.getElementById('evidence-panel').cy.getElementById('r{record_id}').renderedPosition()")
        page.mouse.click(box["x"] + pos["x"], box["y"] + pos["y"])
        try:
            expect(heading).to_contain_text(f"#{record_id} {kind}", timeout=1500)
            return
        except AssertionError:
            continue
    expect(heading).to_contain_text(f"#{record_id} {kind}")


def test_the_evidence_graph_grows_live_and_a_reviewers_note_reaches_the_planner(page, light_task):
    # The form refuses shared memory for a search whose probes keep their own graphs.
    page.get_by_label("Project").fill("Evidence browser")
    page.get_by_label("Search").select_option("mimosa")
    page.get_by_label("Shared memory (SciMARS + Memory)").check()
    page.get_by_role("button", name="Start run").click()
    refusal = page.locator(".new-run .errorlist")
    expect(refusal).to_contain_text("Shared memory is for")
    assert not Run.objects.exists()
    refusal.scroll_into_view_if_needed()
    page.shot("0-memory-refused-for-mimosa")

    # A short SciMARS + Memory run on the light task (two folds): one round, no single agent.
    project = Project.objects.create(name="Evidence browser")
    add_member(project, "ada", "reviewer")
    task = registration.task_for_folder(project, light_task)
    run = controls.start_run(task, search="scimars", memory=True, iterations=1, gate_policy="automatic",
                             single_agent=False)
    page.goto(f"/runs/{run.pk}/")
    expect(page.locator("#ws-state")).to_have_text("live")
    page.evaluate("window.__marker = 1")  # gone if anything reloads the page

    # The first probe's records appear without a reload.
    panel = page.locator("#evidence-panel")
    expect(panel).not_to_have_attribute("data-records", "0", timeout=120_000)
    first = _records(page)
    page.locator("#evidence-panel").scroll_into_view_if_needed()
    page.shot("1-first-records")

    # The reviewer reads a record and links a note to it, while the run goes on.
    first_id, first_kind = page.evaluate(
        "(() => { const n = document.getElementById('evidence-panel').cy.nodes('.record')[0]; "
        "return [n.data('rid'), n.data('kind').replace('_', ' ')]; })()")
    _click_record(page, first_id, first_kind)
    detail = page.locator("#ev-detail")
    expect(detail).to_contain_text("provenance")
    detail.get_by_label("link type").select_option("supports")
    detail.get_by_role("button", name="link my record to it").click()
    expect(page.locator("#ev-form-links")).to_contain_text(f"supports #{first_id}")
    page.locator("#ev-kind").select_option("note")
    page.locator("#ev-text").fill(NOTE)
    page.get_by_role("button", name="Add to graph").click()
    status = page.locator("#ev-form-status")
    expect(status).to_contain_text("Added as record #")
    note_id = int(re.search(r"#(\d+)", status.inner_text()).group(1))
    page.shot("2-note-added")

    # The note reaches the next planner: pushed by its subscription, and in its prompt.
    def planner_given_note():
        for row in Event.objects.filter(run=run, kind="memory_retrieval", agent="planner").order_by("seq"):
            if note_id in row.payload.get("pushed", []):
                return row
        return None

    retrieval = wait_for(planner_given_note, 150, what="a planner to be given the note")
    call = wait_for(lambda: Event.objects.filter(run=run, kind="model_call", agent="planner", source=retrieval.source,
                                                 seq__gt=retrieval.seq).first(), 60, what="the planner's model call")
    prompt = " ".join(m.get("content") or "" for m in call.payload["messages"])
    assert NOTE in prompt and f"#{note_id} note by user:ada" in prompt

    # Still growing live, and the note is drawn (a person's record) with the planner's receipt.
    wait_for(lambda: _records(page) > first + 1, 120, what="more records to arrive live")
    # from the list of records under the graph (the canvas moves while records stream in)
    page.locator("#ev-list-box summary").click()
    page.get_by_role("button", name=f"open record {note_id}", exact=True).click()
    expect(detail.locator("h3")).to_contain_text(f"#{note_id} note")
    expect(page.locator(f"#ev-row-{note_id}")).to_contain_text("user:ada")
    expect(detail).to_contain_text("user:ada")
    expect(detail).to_contain_text(f"supports → #{first_id}")
    expect(detail).to_contain_text("shared trunk")
    expect(detail).to_contain_text("pushed to planner", timeout=30_000)
    assert page.evaluate("window.__marker") == 1, "the run page reloaded itself"
    page.shot("3-grown-note-detail")

    # The filters: notes only leaves the person's record; rejected branches are hidden by default.
    for kind in page.locator("#ev-kinds input").all():
        if kind.get_attribute("value") != "note":
            kind.uncheck()
    expect(panel).to_have_attribute("data-shown", "1")
    for kind in page.locator("#ev-kinds input").all():
        kind.check()
    page.locator("#ev-author").select_option("user:ada")
    expect(panel).to_have_attribute("data-shown", "1")
    page.locator("#ev-author").select_option("")
    page.shot("4-panel", full_page=True)
