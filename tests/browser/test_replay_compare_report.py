"""Replay, comparison and report in a real browser (Playwright + Debian's Chromium against a
running studio): the replay slider takes the DAG back to an earlier state, two runs ticked on
the home page compare side by side, and the report downloads from the run page and opens from
disk (file://) with nothing fetched from anywhere. Screenshots land in test-artifacts/screenshots/."""
from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import SHOTS
from tests.integration.test_replay_compare_report import record_run, record_tree_run
from webapp.runs.replay_views import state_at

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]




def _slide_to(page, index: int) -> None:
    """Move the slider as a drag does: set its value, fire input."""
    page.locator("#replay-slider").evaluate(
        "(el, i) => { el.value = i; el.dispatchEvent(new Event('input', { bubbles: true })); }", index)


def test_replay_scrubs_back_compare_two_runs_and_open_the_report(page, light_task, tmp_path):
    run, _ = record_run(light_task, "Replay in the browser")
    other, _ = record_run(light_task, "Replay in the browser 2")
    agents = [a["id"] for a in run.current_version.data["agents"]]

    # Replay: the end of the run, then back to when probe 2's first agent had just started.
    page.goto(f"/runs/{run.pk}/replay")
    expect(page.locator("#replay[data-ready='1']")).to_have_count(1)
    expect(page.locator(f"#state-{agents[-1]}")).to_have_attribute("data-state", "failed")
    expect(page.locator("#replay-queue li")).to_have_text(["it 1 · prompt_refinement coder · approved by user:ada"])
    page.shot("replay-end", full_page=True)
    events = list(run.events.order_by("seq").values_list("seq", "kind", "source"))
    earlier = next(i for i, (seq, kind, source) in enumerate(events) if source == "002-iter1" and kind == "agent_started")
    _slide_to(page, earlier)
    seq = events[earlier][0]
    expect(page.locator("#replay")).to_have_attribute("data-seq", str(seq))
    then = state_at(run, seq)["states"]
    assert then[agents[0]] == "running" and then[agents[-1]] == "waiting"
    for agent, state in then.items():
        expect(page.locator(f"#state-{agent}")).to_have_attribute("data-state", state)
    expect(page.locator("#replay-versions li")).to_have_count(2)
    page.shot("replay-earlier", full_page=True)
    # Before the mutation was decided it was waiting for a person.
    before = next(i for i, (s, kind, source) in enumerate(events) if source == "002-iter1") - 1
    _slide_to(page, before)
    expect(page.locator(f"#state-{agents[-1]}")).to_have_attribute("data-state", "done")  # probe 1 ran them all
    # Play at 50x from the start: the position moves on by itself.
    _slide_to(page, 0)
    page.locator("#replay-speed").select_option("50")
    page.get_by_role("button", name="Play").click()
    page.wait_for_function("() => Number(document.getElementById('replay').dataset.seq) > 3")
    page.get_by_role("button", name="Pause").click()

    # A tree run replays its nodes: before n2 was recorded, n1 was the champion.
    tree = record_tree_run(light_task, "Tree replay in the browser")
    page.goto(f"/runs/{tree.pk}/replay")
    expect(page.locator("#replay-champion")).to_have_text("champion then: n2 · 0.3000")
    expect(page.locator("#replay-tree li")).to_have_count(3)
    first_node = next(i for i, e in enumerate(tree.events.order_by("seq").values_list("kind", flat=True)) if e == "tree_node")
    _slide_to(page, first_node)
    expect(page.locator("#replay-champion")).to_have_text("champion then: n1 · 0.5000")
    expect(page.locator("#replay-tree li")).to_have_count(1)
    page.shot("replay-tree")

    # Compare: tick both runs on the home page.
    page.goto("/")
    page.get_by_label(f"Compare run {run.pk}").check()
    page.get_by_label(f"Compare run {other.pk}").check()
    page.get_by_role("button", name="Compare the ticked runs").click()
    expect(page.get_by_role("heading", name="2 runs side by side")).to_be_visible()
    for r in (run, other):
        expect(page.locator(f"td[data-run='{r.pk}'][data-field='final']")).to_have_text("0.2330")
    expect(page.locator("#compare[data-ready='1'] #compare-chart .scatterlayer .trace")).to_have_count(4)
    page.shot("compare", full_page=True)

    # Report: download it from the run page, open the file from disk.
    page.goto(f"/runs/{run.pk}/")
    with page.expect_download() as info:
        page.get_by_role("link", name="(HTML)").click()
    path = tmp_path / info.value.suggested_filename
    info.value.save_as(path)
    # A page of its own: the run page's lazy panels may still be loading, and their requests
    # must not be taken for the report's.
    report = page.context.new_page()
    requested = []
    report.on("request", lambda req: requested.append(req.url))
    report.goto(path.as_uri())
    expect(report.get_by_role("heading", name="Decisions")).to_be_visible()
    expect(report.locator("svg.workflow g.agent")).to_have_count(len(agents))
    expect(report.locator("#metric-final")).to_have_text("0.2330")
    report.wait_for_load_state("networkidle")
    assert [u for u in requested if not u.startswith("file://")] == [], "the report fetched nothing"
    report.screenshot(path=SHOTS / "test_replay_scrubs_back_compare_two_runs_and_open_the_report-report.png",
                      full_page=True)
