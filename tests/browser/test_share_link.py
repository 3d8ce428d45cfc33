"""A share link in a real browser (Playwright + Debian's Chromium against a running studio:
Daphne, a Celery worker, embedded Redis): the owner creates a link on the run page while the
run is going; a fresh browser context with no account opens it, watches the LIVE run update,
finds no write control anywhere, and has a POST through the link refused; once the owner
revokes the link, its page stops being live and reloading it says the link was revoked.
Screenshots land in test-artifacts/screenshots/."""
from __future__ import annotations

import pytest
from playwright.sync_api import expect, sync_playwright

from tests.browser.conftest import CHROMIUM_ARGS, SHOTS
from tests.studio_harness import add_member, wait_for
from webapp.runs import controls
from webapp.runs.models import ACTIVE_STATUSES, GatePolicy, Mutation, Run
from webapp.tasks import registration
from webapp.teams.models import Project

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_a_share_link_shows_the_live_run_read_only_to_someone_without_an_account(request, studio, demo_user,
                                                                                   light_task, monkeypatch):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    SHOTS.mkdir(parents=True, exist_ok=True)
    project = Project.objects.create(name="Shared in the browser")
    add_member(project, "ada", "owner")
    run = controls.start_run(registration.task_for_folder(project, light_task), search="mimosa",
                             gate_policy=GatePolicy.MANUAL, iterations=2, single_agent=False)
    js_errors = []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
            owner_context = browser.new_context(base_url=studio.url, viewport={"width": 1440, "height": 900})
            owner_context.set_default_timeout(30_000)
            owner = owner_context.new_page()
            owner.on("pageerror", lambda error: js_errors.append(error))
            owner.goto("/login/")
            owner.get_by_label("Name").fill("ada")
            owner.get_by_label("Password").fill("lovelace-1843")
            owner.get_by_role("button", name="Sign in").click()
            owner.goto(f"/runs/{run.pk}/")
            expect(owner.locator("#ws-state")).to_have_text("live")

            # the owner's share card: one hour, the live run
            card = owner.locator("#share-links")
            card.get_by_label("Expires after").select_option("1h")
            card.get_by_label("Note").fill("for the collaborator")
            card.get_by_role("button", name="Create share link").click()
            url_box = owner.locator("input.share-url")
            expect(url_box).to_have_count(1)
            url = url_box.input_value()
            assert "/share/" in url
            owner.locator("#share-title").scroll_into_view_if_needed()
            owner.screenshot(path=SHOTS / f"{request.node.name}-owner-card.png")

            # someone else, with no account: a fresh context, no cookies
            guest_context = browser.new_context(viewport={"width": 1440, "height": 900})
            guest_context.set_default_timeout(30_000)
            guest = guest_context.new_page()
            guest.on("pageerror", lambda error: js_errors.append(error))
            guest.goto(url)
            expect(guest.locator("#share-banner")).to_contain_text("read-only")
            expect(guest.locator("#ws-state")).to_have_text("live")
            # live: the run's next proposal reaches the guest's page as it is made (or is there
            # already), waiting for a reviewer, with no way for the guest to decide it
            pending = guest.locator("#queue article.mutation.m-proposed")
            expect(pending).to_have_count(1, timeout=120_000)
            mutation_id = pending.get_attribute("id")
            expect(pending).to_contain_text("Waiting for a reviewer")
            guest.screenshot(path=SHOTS / f"{request.node.name}-guest-live.png", full_page=True)
            # the owner approves it; the guest sees the decision and the run going on, live
            owner.locator(f"#{mutation_id}").get_by_role("button", name="Approve").click()
            expect(guest.locator(f"#{mutation_id}")).to_contain_text("approved by user:ada")
            expect(guest.locator("#dag-label")).to_contain_text("v2")  # the approved version, adopted
            expect(guest.locator("#activity li").first).to_contain_text("it 2", timeout=60_000)
            guest.screenshot(path=SHOTS / f"{request.node.name}-guest-approved.png", full_page=True)

            # no write control anywhere on the page
            for selector in ("#run-header .controls", "form.decide", "#ev-form", "#share-links",
                             "#editor form button[type=submit]"):
                expect(guest.locator(selector)).to_have_count(0)
            expect(guest.get_by_role("button", name="Pause")).to_have_count(0)
            expect(guest.get_by_role("button", name="Cancel")).to_have_count(0)
            # and a POST from this context is refused, nothing changed
            share_path = url.split(studio.url, 1)[1]
            for rest in ("control/cancel", "control/pause", "evidence/records"):
                assert guest_context.request.post(studio.url + share_path + rest).status == 403
            veto = f"{studio.url}{share_path}mutations/{mutation_id.split('-')[1]}/veto"
            assert guest_context.request.post(veto).status == 403
            assert guest_context.request.post(f"{studio.url}/runs/{run.pk}/control/cancel",
                                              max_redirects=0).status in (302, 403)
            assert Run.objects.get(pk=run.pk).status not in ("pausing", "paused", "cancelling", "cancelled")
            assert Mutation.objects.get(pk=int(mutation_id.split("-")[1])).status == "approved"

            # the owner revokes it: the guest's page goes off the air and cannot come back
            owner.once("dialog", lambda d: d.accept())
            owner.locator("#share-links").get_by_role("button", name="Revoke").click()
            expect(owner.locator("#share-links")).to_contain_text("revoked")
            expect(guest.locator("#ws-state")).not_to_have_text("live", timeout=15_000)
            guest.reload()
            expect(guest.locator("#share-refused-message")).to_contain_text("was revoked")
            guest.screenshot(path=SHOTS / f"{request.node.name}-guest-revoked.png")
            browser.close()
    finally:
        for active in Run.objects.filter(status__in=ACTIVE_STATUSES):
            controls.cancel_run(active)
        wait_for(lambda: not Run.objects.filter(status__in=ACTIVE_STATUSES).exists(), 120, what="runs to stop")
    assert not js_errors, f"JavaScript errors on the page: {js_errors}"
