"""A run as scientists show it, and a fork from one of its versions (issue 26 items 7 and 8), in a
real browser against a running studio with a real worker.

A finished Mimosa run: clicking an agent in the DAG opens what it last did (its inputs, prompt,
answer, code and output); the prediction-vs-truth and residual plots are on the page; the home
page's runs table shows the official metric, the best baseline, the single agent and the cost,
a page at a time. Then a fork from v1 with an edited contract: a broken edit is refused with the
engine's reason and nothing started; the edited one becomes a run of its own that starts from it."""
from __future__ import annotations

import json

import pytest
from playwright.sync_api import expect

from tests.studio_harness import add_member, wait_for
from webapp.runs import controls
from webapp.runs.models import GatePolicy, Run, RunStatus
from webapp.tasks import registration
from webapp.teams.models import Project

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
PROBE_MS = 240_000


def test_a_finished_run_shows_each_agent_its_predictions_and_forks_from_a_version(page, light_task):
    project = Project.objects.create(name="Show and fork")
    add_member(project, "ada", "owner")
    task = registration.task_for_folder(project, light_task)
    run = controls.start_run(task, search="mimosa", gate_policy=GatePolicy.AUTOMATIC, iterations=1, single_agent=False)
    wait_for(lambda: Run.objects.get(pk=run.pk).status == RunStatus.COMPLETED, PROBE_MS / 1000,
             what="the run to complete")
    run.refresh_from_db()

    page.goto(f"/runs/{run.pk}/")
    expect(page.locator("#ws-state")).to_have_text("live")
    # the agent that ran the last program, clicked where the graph draws it
    coder = run.events.filter(kind="code_execution").exclude(agent="").order_by("-seq").first().agent
    page.wait_for_load_state("networkidle")
    where = page.evaluate("(id) => document.getElementById('dag')._cyreg.cy.getElementById(id).renderedPosition()", coder)
    page.locator("#dag").click(position={"x": where["x"], "y": where["y"]})
    detail = page.locator("#agent-detail .agent-detail")
    expect(detail).to_have_attribute("data-agent", coder)
    for part in ("Inputs", "Prompt", "Answer", "Code", "Output"):
        expect(detail.locator("h4").filter(has_text=part).first).to_be_visible()
    expect(detail.locator("pre.code").first).to_contain_text("predictions")
    page.shot("agent-detail", full_page=True)
    # no edge label sits on another label or on a node (the graph's own boxes, as drawn)
    overlaps = page.evaluate("""() => { const cy = document.getElementById('dag')._cyreg.cy;
        const only = { includeNodes: false, includeEdges: false, includeLabels: true, includeMainLabels: true,
                       includeSourceLabels: false, includeTargetLabels: false, includeOverlays: false, includeUnderlays: false };
        const labels = cy.edges().filter((e) => e.data('label')).map((e) => [e.id(), e.boundingBox(only)]);
        const nodes = cy.nodes().map((n) => [n.id(), n.boundingBox({ includeLabels: false, includeOverlays: false })]);
        const hit = (a, b) => a.x1 < b.x2 && b.x1 < a.x2 && a.y1 < b.y2 && b.y1 < a.y2;
        const out = [];
        labels.forEach(([id, box], i) => {
          labels.slice(i + 1).forEach(([other, b]) => { if (hit(box, b)) out.push(id + ' / ' + other); });
          nodes.forEach(([node, b]) => { if (hit(box, b)) out.push(id + ' on ' + node); });
        });
        return out; }""")
    assert overlaps == [], overlaps

    # the held-out comparison, drawn
    card = page.locator("#predictions-card")
    expect(card.locator(".chart-pvt .main-svg").first).to_be_attached()
    expect(card.locator(".chart-residuals .main-svg").first).to_be_attached()
    expect(card.locator(".predictions-note")).to_contain_text("held-out rows")
    card.scroll_into_view_if_needed()
    page.shot("predictions")

    # the runs table: official metric, baselines, cost; a page at a time
    Run.objects.bulk_create([Run(task=run.task, status=RunStatus.CANCELLED) for _ in range(30)])
    page.goto("/")
    table = page.locator(f"#runs-{run.task.pk}")
    expect(table.locator("thead")).to_contain_text("Best baseline")
    expect(table.locator("tbody tr")).to_have_count(25)
    expect(table.locator(".pager")).to_contain_text("runs 1–25 of 31")
    table.locator(".pager a", has_text="older").click()
    row = page.locator(f"#runs-{run.task.pk} tbody tr").filter(
        has=page.get_by_role("link", name=f"Run {run.pk}", exact=True))
    final = run.result["final"]["official"]["value"]
    expect(row).to_contain_text(f"{final:.4f}")
    expect(row.locator("td").nth(8)).to_contain_text("$")
    page.shot("runs-table", full_page=True)

    # fork from v1: a contract the engine refuses, then a good edit
    page.goto(f"/runs/{run.pk}/")
    page.locator("#fork summary").click()
    form = page.locator("#fork-slot form.fork-form")
    expect(form).to_be_visible()
    workflow = json.loads(form.locator("textarea").input_value())
    broken = json.loads(json.dumps(workflow))
    broken["edges"][0]["contract"] = "dict[str, T]"
    form.locator("textarea").fill(json.dumps(broken))
    before = Run.objects.count()
    form.get_by_role("button", name="Start the fork").click()
    expect(page.locator("#fork-slot .errorlist")).to_contain_text("contract")
    assert Run.objects.count() == before
    page.shot("fork-refused")
    edited = json.loads(json.dumps(workflow))
    edited["agents"][0]["prompt"] = (edited["agents"][0].get("prompt") or "") + " Plot the residuals first."
    edited.pop("hash", None)
    page.locator("#fork-slot textarea").fill(json.dumps(edited, indent=2))
    page.locator("#fork-slot").get_by_role("button", name="Start the fork").click()
    expect(page.locator("p.forked")).to_contain_text(f"Forked from run {run.pk} at v1")
    fork = Run.objects.exclude(pk=run.pk).filter(forked_from=run).get()
    assert fork.search == run.search and fork.iterations == 1
    wait_for(lambda: fork.versions.exists(), PROBE_MS / 1000, what="the fork's search to start")
    first = fork.versions.order_by("number").first()
    assert first.data["agents"][0]["prompt"].endswith("Plot the residuals first.")
    assert "fork" in first.note
    page.shot("fork-started", full_page=True)
