"""A person's half-written annotation is never lost to a live update (a fault CI hit: the list
was read again on the socket's catch-up, the read was in flight when the person started typing,
and its answer replaced the list with an empty form). Real browser (Playwright + Debian's
Chromium) against the session's studio; the read is held back by the test so the race is not
left to chance."""
from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import page  # noqa: F401  (the signed-in browser page, a fixture)
from tests.studio_harness import add_member, running_run
from webapp.annotations.models import Annotation, LabelSet
from webapp.runs.models import Run, RunStatus

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_a_list_read_again_while_a_person_types_keeps_their_draft(page, light_task):  # noqa: F811
    run = running_run(light_task, "Drafts")
    Run.objects.filter(pk=run.pk).update(status=RunStatus.COMPLETED)
    add_member(run.task.project, "ada", "annotator")
    LabelSet.objects.create(project=run.task.project, name="Failure modes", labels=["wrong data path", "good repair"])
    page.goto(f"/runs/{run.pk}/")
    expect(page.locator("#ws-state")).to_have_attribute("data-live", "1")
    page.locator("#version-annotations summary").click()
    box = page.locator("#version-ann-slot .annotations")
    expect(box).to_have_attribute("data-target", "version:1")

    # Someone else annotates the version; the page is told to read its lists again (as after a
    # socket that was down), and that read is held on its way.
    Annotation.objects.create(run=run, target_kind="version", target_ref="1", comment="from a colleague")
    held = []
    page.route(re.compile(r".*/annotations\?target_kind=version.*"), lambda route: held.append(route))
    page.evaluate("document.dispatchEvent(new CustomEvent('trellis:reconnected'))")
    for _ in range(50):
        if held:
            break
        page.wait_for_timeout(100)
    assert held, "the list was not read again"

    comment = box.get_by_label("Comment")
    comment.fill("the initial team reads the raw file")
    box.get_by_label("wrong data path").check()
    with page.expect_response(re.compile(r".*/annotations\?target_kind=version.*")):
        held[0].continue_()
    page.unroute(re.compile(r".*/annotations\?target_kind=version.*"))
    page.wait_for_timeout(500)  # htmx would have swapped by now (its settle delay is 20 ms)
    expect(comment).to_have_value("the initial team reads the raw file")
    expect(box.get_by_label("wrong data path")).to_be_checked()

    # Posting it shows both: the person's annotation and the one that arrived meanwhile.
    box.get_by_role("button", name="Annotate").click()
    expect(box).to_contain_text("the initial team reads the raw file")
    expect(box).to_contain_text("from a colleague")
    expect(box.get_by_label("Comment")).to_have_value("")
