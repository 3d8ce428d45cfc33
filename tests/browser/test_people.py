"""A second person joins through an invitation in a real browser: the owner makes the link, the
newcomer opens it in their own browser, creates an account, and annotates a run of the project."""
from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import SHOTS
from tests.studio_harness import add_member, running_run
from webapp.annotations.models import Annotation
from webapp.runs.models import Event, Run, RunStatus

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_a_second_person_is_invited_signs_up_and_annotates(page, studio, light_task):
    run = running_run(light_task, "Invited lab")
    Run.objects.filter(pk=run.pk).update(status=RunStatus.COMPLETED)
    Event.objects.create(run=run, seq=1, source="r", source_seq=1, ts=1000.0, kind="check", agent="coder",
                         iteration=1, payload={"name": "range", "passed": False, "detail": "values out of range"})
    add_member(run.task.project, "ada", "owner")

    page.goto(f"/projects/{run.task.project_id}/members")
    invite = page.locator("form.invite")
    invite.get_by_label("Email").fill("grace@lab.org")
    invite.get_by_label("Role").select_option(label="annotator")
    invite.get_by_role("button", name="Make an invitation").click()
    link = re.search(r"https?://\S+/invite/[A-Za-z0-9_-]+", page.locator("body").inner_text()).group(0)
    expect(page.locator("table.invitations")).to_contain_text("grace@lab.org")
    page.shot("1-invited")

    if True:  # a browser context of grace's own: no cookie of ada's
        context = page.context.browser.new_context(base_url=studio.url, viewport={"width": 1280, "height": 860})
        grace = context.new_page()
        errors = []
        grace.on("pageerror", lambda e: errors.append(e))
        grace.goto(link)
        expect(grace.get_by_role("heading", name="Join Invited lab")).to_be_visible()
        grace.locator("#id_username").fill("grace")
        grace.locator("#id_password1").fill("hopper-1906-cobol")
        grace.locator("#id_password2").fill("hopper-1906-cobol")
        grace.screenshot(path=SHOTS / "test_a_second_person_is_invited_signs_up_and_annotates-2-sign-up.png")
        grace.get_by_role("button", name="Create my account and join").click()
        expect(grace.get_by_role("heading", name="Projects and runs")).to_be_visible()
        expect(grace.locator("body")).to_contain_text("You joined Invited lab; your role: annotator")

        grace.goto(f"/runs/{run.pk}/trace")
        grace.locator("#ev-1").locator("xpath=..").locator("xpath=preceding-sibling::tr[1]").get_by_role(
            "button", name="details").click()
        form = grace.locator("#ev-1 .ann-form")
        form.get_by_label("Comment").fill("the coder never clips its predictions")
        form.get_by_role("button", name="Annotate").click()
        expect(grace.locator("#ev-1 .annotations")).to_contain_text("the coder never clips its predictions")
        grace.screenshot(path=SHOTS / "test_a_second_person_is_invited_signs_up_and_annotates-3-annotated.png")
        context.close()
    assert errors == []
    assert Annotation.objects.get().author.username == "grace"
    # the link was good once
    page.goto(link)
    expect(page.locator("body")).to_contain_text("This invitation was accepted")
