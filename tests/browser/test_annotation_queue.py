"""Team annotation in a real browser (Playwright + Debian's Chromium against a running studio):
two annotators, each in a browser context of their own, work through the same queue with the
keyboard only (label keys, pass/fail, skip, previous, Enter to save) and the queue page shows
their progress and agreement (Cohen's kappa); an annotation made in one context appears in
the other's trace viewer without a reload. Screenshots land in test-artifacts/screenshots/."""
from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import expect, sync_playwright

from tests.browser.conftest import CHROMIUM_ARGS, SHOTS
from tests.studio_harness import add_member, running_run
from webapp.annotations.agreement import cohen_kappa
from webapp.annotations.models import Annotation, AnnotationQueue, LabelSet
from webapp.runs.models import Event, Run, RunStatus

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

LABELS = ["wrong data path", "hallucinated value", "good repair"]


@pytest.fixture
def queue(light_task):
    """A finished run whose trace has four failed checks, a label set scored pass/fail and a
    queue of those checks; anna and abel annotate, rita reviews."""
    run = running_run(light_task, "Annotation browser")
    Run.objects.filter(pk=run.pk).update(status=RunStatus.COMPLETED)
    for seq, (agent, name, passed) in enumerate([("coder", "shape", False), ("coder", "shape", True),
                                                 ("coder", "range", False), ("planner", "plan", False),
                                                 ("coder", "finite", False)], start=1):
        Event.objects.create(run=run, seq=seq, source="r", source_seq=seq, ts=1000.0 + seq, kind="check", agent=agent,
                             iteration=1, payload={"name": name, "passed": passed, "detail": f"{name} check on {agent}"})
    project = run.task.project
    for name, role in (("anna", "annotator"), ("abel", "annotator"), ("rita", "reviewer")):
        add_member(project, get_user_model().objects.create_user(name, password=f"pw-{name}-1843"), role)
    return run


def _login(browser, studio, name: str):
    context = browser.new_context(base_url=studio.url, viewport={"width": 1280, "height": 860})
    context.set_default_timeout(15_000)
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(e))
    page.errors = errors
    page.goto("/login/")
    page.get_by_label("Name").fill(name)
    page.get_by_label("Password").fill(f"pw-{name}-1843")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Projects and runs")).to_be_visible()
    return page


def _label_item(page, keys: list[str], position: int, total: int) -> None:
    """Press the keys on the item shown, then Enter: the next item (or the queue page) loads."""
    expect(page.locator("#qw-pos")).to_have_text(str(position))
    page.locator("body").click(position={"x": 5, "y": 300})  # focus the page, not a field
    for key in keys:
        page.keyboard.press(key)
    page.keyboard.press("Enter")
    if position < total:
        expect(page.locator("#qw-pos")).to_have_text(str(position + 1))
    else:
        expect(page).to_have_url(re.compile(r"/queues/\d+/$"))


def test_two_annotators_label_a_queue_with_the_keyboard_and_see_their_agreement(studio, queue, request, monkeypatch):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    SHOTS.mkdir(parents=True, exist_ok=True)
    name = request.node.name
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        rita, anna, abel = (_login(browser, studio, n) for n in ("rita", "anna", "abel"))

        # The reviewer defines the project's label set, then the queue: the run's items where a check failed.
        rita.goto(f"/projects/{queue.task.project_id}/label-sets")
        rita.get_by_label("Name").fill("Failure modes")
        rita.get_by_label("Labels, one a line (at most 9)").fill("\n".join(LABELS))
        rita.locator("form:has(button:text(\"Create label set\")) select[name=score_kind]").select_option("pass_fail")
        rita.get_by_role("button", name="Create label set").click()
        expect(rita.locator("tr[id^=label-set-]", has_text="Failure modes")).to_contain_text("3 good repair")
        rita.screenshot(path=SHOTS / f"{name}-0-label-sets.png", full_page=True)
        assert LabelSet.objects.get().labels == LABELS
        rita.goto(f"/projects/{queue.task.project_id}/queues")
        rita.get_by_label("Name").fill("Failed checks")
        rita.get_by_label(re.compile(f"run {queue.pk}")).check()
        rita.get_by_label("only items where a check failed").check()
        rita.get_by_role("button", name="Create queue").click()
        expect(rita.get_by_role("heading", name="Failed checks")).to_be_visible()
        q = AnnotationQueue.objects.get()
        total = q.items.count()
        assert total == 4

        # anna: 1 (+fail), 1 2 (+fail), s (skip), 3 (+pass); she goes back once with k and forth with j.
        anna.goto(f"/queues/{q.pk}/work")
        expect(anna.locator(".qw-item h2")).to_contain_text("event #1 · check")
        anna.locator("body").click(position={"x": 5, "y": 300})
        anna.keyboard.press("1")
        anna.keyboard.press("-")
        expect(anna.locator("input[data-key='1']")).to_be_checked()
        anna.shot = lambda step: anna.screenshot(path=SHOTS / f"{name}-{step}.png", full_page=True)
        anna.shot("1-anna-labels-item-1")
        _label_item(anna, [], 1, total)
        _label_item(anna, ["1", "2", "-"], 2, total)
        anna.keyboard.press("k")
        expect(anna.locator("#qw-pos")).to_have_text("2")
        expect(anna.locator("input[data-key='2']")).to_be_checked()  # her answer is shown again
        anna.keyboard.press("j")
        expect(anna.locator("#qw-pos")).to_have_text("3")
        anna.keyboard.press("s")
        expect(anna.locator("#qw-pos")).to_have_text("4")
        _label_item(anna, ["3", "+"], 4, total)

        # abel: agrees on "wrong data path" for items 1 and 2, not on 4; on "good repair" and pass/fail
        # everywhere; labels item 3, which anna skipped.
        abel.goto(f"/queues/{q.pk}/work")
        _label_item(abel, ["1", "-"], 1, total)
        _label_item(abel, ["1", "-"], 2, total)
        _label_item(abel, ["2", "+"], 3, total)
        abel.locator("body").click(position={"x": 5, "y": 300})
        for key in ("1", "3", "+"):
            abel.keyboard.press(key)
        abel.keyboard.press("c")
        abel.keyboard.type("the planner read the wrong file")
        abel.keyboard.press("Enter")  # Enter in the comment saves too
        expect(abel).to_have_url(re.compile(r"/queues/\d+/$"))

        mine = {who: {a.queue_item.position: a for a in Annotation.objects.filter(author__username=who)} for who in ("anna", "abel")}
        assert mine["anna"][3].skipped and mine["anna"][2].labels == ["wrong data path", "hallucinated value"]
        assert mine["abel"][4].comment == "the planner read the wrong file"

        # The queue page: both annotators' progress and their agreement on the items both labelled (1, 2, 4).
        rita.goto(f"/queues/{q.pk}/")
        table = rita.locator("#agreement")
        expect(table).to_be_visible()
        # both labelled items 1, 2 and 4: each label present or absent, in that order
        expected = {"wrong data path": cohen_kappa([True, True, False], [True, True, True]),
                    "good repair": cohen_kappa([False, False, True], [False, False, True]),
                    "pass/fail": cohen_kappa(["fail", "fail", "pass"], ["fail", "fail", "pass"])}
        for label, value in expected.items():
            expect(table.locator("tr", has_text=label)).to_contain_text(f"{value:.3f}")
        expect(table.locator("tr", has_text="good repair")).to_contain_text("almost perfect")
        expect(table.locator("tr", has_text="hallucinated value")).to_contain_text("Cohen")
        expect(rita.locator(".queue-progress")).to_contain_text("anna")
        expect(rita.locator(".queue-progress")).to_contain_text("abel")
        rita.screenshot(path=SHOTS / f"{name}-2-agreement.png", full_page=True)

        # Live: anna reads event 5's annotations in the trace; abel annotates it; anna sees it, no reload.
        anna.goto(f"/runs/{queue.pk}/trace")
        anna.evaluate("window.__marker = 1")
        anna.locator("#ev-5").locator("xpath=..").locator("xpath=preceding-sibling::tr[1]").get_by_role("button", name="details").click()
        expect(anna.locator("#ev-5 .annotations")).to_be_visible()
        expect(anna.locator("body")).to_have_attribute("data-annotations-live", "1")
        abel.goto(f"/runs/{queue.pk}/trace")
        abel.locator("#ev-5").locator("xpath=..").locator("xpath=preceding-sibling::tr[1]").get_by_role("button", name="details").click()
        form = abel.locator("#ev-5 .ann-form")
        form.get_by_label("good repair").check()
        form.get_by_label("pass").check()
        form.get_by_label("Comment").fill("the retry fixed the range")
        form.get_by_role("button", name="Annotate").click()
        expect(abel.locator("#ev-5 .annotations")).to_contain_text("the retry fixed the range")
        expect(anna.locator("#ev-5 .annotations")).to_contain_text("the retry fixed the range", timeout=10_000)
        assert anna.evaluate("window.__marker") == 1
        anna.locator("#ev-5").scroll_into_view_if_needed()
        anna.screenshot(path=SHOTS / f"{name}-3-live-annotation.png")
        # On the run page: a workflow version's annotations, beside the versions.
        rita.goto(f"/runs/{queue.pk}/")
        rita.locator("#version-annotations summary").click()
        box = rita.locator("#version-ann-slot .annotations")
        expect(box).to_have_attribute("data-target", "version:1")
        box.get_by_label("Comment").fill("the initial team reads the raw file")
        box.get_by_role("button", name="Annotate").click()
        expect(rita.locator("#version-ann-slot .annotations")).to_contain_text("the initial team reads the raw file")
        rita.locator("#version-annotations").scroll_into_view_if_needed()
        rita.screenshot(path=SHOTS / f"{name}-4-version-annotation.png")

        # The audit log names who annotated what.
        rita.goto(f"/projects/{queue.task.project_id}/audit?action=annotation")
        expect(rita.locator("table.audit")).to_contain_text("user:abel")
        rita.screenshot(path=SHOTS / f"{name}-5-audit.png", full_page=True)
        errors = anna.errors + abel.errors + rita.errors
        browser.close()
    assert not errors, f"JavaScript errors: {errors}"
