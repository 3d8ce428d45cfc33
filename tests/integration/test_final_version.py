"""Issue 37, item 11: after a late edit, the run's header said "final v4 350c760c5c" (that hash
is v5 on the timeline), and the comparison and the HTML/PDF report showed v6, an edit that was
never adopted ("refused: the run was completed before it could adopt it"). The final is the
version the official score was computed on, everywhere a reader looks."""
from __future__ import annotations

import copy

import pytest
from django.test import Client

from tests.studio_harness import add_member, running_run
from webapp.runs.bridge import record_version
from webapp.runs.compare import summary
from webapp.runs.models import Run, RunStatus
from webapp.runs.presenters import graph_state
from webapp.runs.report import report_context

pytestmark = pytest.mark.django_db(transaction=True)


def _variant(data: dict, words: str) -> dict:
    out = copy.deepcopy(data)
    out.pop("hash", None)
    out["agents"][0]["prompt"] = out["agents"][0].get("prompt", "") + words
    return out


def test_the_final_is_what_was_scored_on_every_page(light_task, demo_user):
    run = running_run(light_task, "Final")
    v1 = run.versions.get(number=1)
    scored = record_version(run, _variant(v1.data, " keep the ids"), "mutator", "accepted", 1)         # v2
    record_version(run, _variant(v1.data, " try a spline"), "mutator", "accepted", 2)                  # v3
    again = record_version(run, copy.deepcopy(scored.data), "user:ada", "back to v2", 3)             # v4 = v2's hash
    late = record_version(run, _variant(v1.data, " a late edit"), "user:ada", "edit", 3, adopted=False)  # v5
    late.outcome = "refused: the run was completed before it could adopt it"
    late.save()
    official = {"ok": True, "value": 0.25, "metric": "relative_l2"}
    Run.objects.filter(pk=run.pk).update(status=RunStatus.COMPLETED, result={
        "initial": {"workflow_hash": v1.hash, "J": 0.5, "validation": 0.4, "official": official},
        "final": {"workflow_hash": scored.hash, "J": 0.7, "validation": 0.3, "official": official}})
    run = Run.objects.get(pk=run.pk)
    assert again.hash == scored.hash and again.number == 4

    assert run.final_version.number == 4  # the newest adopted version of the scored workflow
    assert summary(run)["version"].number == 4
    assert report_context(run)["version"].number == 4
    assert graph_state(run)["label"].startswith("v4")
    add_member(run.task.project, demo_user, "viewer")
    c = Client()
    c.force_login(demo_user)
    header = c.get(f"/runs/{run.pk}/header").content.decode()
    assert f"v4 <code>{scored.hash[:10]}</code>" in header
    assert f"v5 <code>{late.hash[:10]}" not in header
    report = c.get(f"/runs/{run.pk}/report.html").content.decode()
    assert f"v4 · user:ada · {scored.hash[:12]}" in report and f"v5 · user:ada · {late.hash[:12]}" not in report
