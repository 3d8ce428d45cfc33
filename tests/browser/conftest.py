"""The browser tests' signed-in page: Playwright with Debian's Chromium against the session's
running studio (tests/conftest.py ``studio``)."""
from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import expect, sync_playwright

SHOTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "screenshots"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]


@pytest.fixture
def page(request, studio, demo_user, monkeypatch):
    """A logged-in 1440x900 page (ada). ``page.shot(step)`` saves a full-page screenshot named
    after the test. Afterwards every run still going is cancelled (the worker must not write
    while the test database is flushed), and no JavaScript error may have happened on the page."""
    from tests.studio_harness import wait_for
    from webapp.runs import controls
    from webapp.runs.models import ACTIVE_STATUSES, Run

    # Sync Playwright keeps an event loop running in this thread, which Django's ORM refuses.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        context = browser.new_context(base_url=studio.url, viewport={"width": 1440, "height": 900},
                                      accept_downloads=True)
        context.set_default_timeout(30_000)
        pg = context.new_page()
        js_errors = []
        # the stack too: an error raised inside a library (cytoscape's renderer) names only a property
        pg.on("pageerror", lambda error: js_errors.append((pg.url, error.message, error.stack)))
        # something the Content-Security-Policy blocked (an inline handler, eval, a foreign source)
        pg.on("console", lambda m: "Content Security Policy" in m.text and js_errors.append((pg.url, m.text, "")))
        pg.goto("/login/")
        pg.get_by_label("Name").fill("ada")
        pg.get_by_label("Password").fill("lovelace-1843")
        pg.get_by_role("button", name="Sign in").click()
        expect(pg.get_by_role("heading", name="Projects and runs")).to_be_visible()
        pg.shot = lambda step, **kw: pg.screenshot(path=SHOTS / f"{request.node.name}-{step}.png",
                                                   **{"full_page": True, **kw})
        yield pg
        browser.close()
    for run in Run.objects.filter(status__in=ACTIVE_STATUSES):
        controls.cancel_run(run)
    wait_for(lambda: not Run.objects.filter(status__in=ACTIVE_STATUSES).exists(), 120, what="runs to stop")
    assert not js_errors, f"JavaScript errors on the page: {js_errors}"
