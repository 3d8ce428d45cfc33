"""A fork starts a new run from a version of another, with the person's edit (issue 26 item 8):
the engine's own checks refuse a broken edit with nothing created, and a good one runs, its
search starting from exactly the edited workflow."""
from __future__ import annotations

import json

import pytest

from tests.studio_harness import running_run
from webapp.runs import controls, forking
from webapp.runs.models import Run, RunStatus

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def source(light_task, demo_user):
    run = running_run(light_task, "Fork")
    Run.objects.filter(pk=run.pk).update(status=RunStatus.COMPLETED, iterations=3, gate_policy="automatic", single_agent=False)
    run.refresh_from_db()
    return run


def test_a_broken_edit_is_refused_with_every_problem_and_nothing_is_created(source):
    version = source.current_version
    data = json.loads(forking.editable_text(version))
    data["edges"][0]["contract"] = "dict[str, T]"
    data["edges"].append({**data["edges"][0], "source": data["edges"][0]["target"], "target": data["edges"][0]["source"]})
    before = Run.objects.count()
    with pytest.raises(forking.ForkError) as info:
        forking.parse_workflow(json.dumps(data))
    assert len(info.value.problems) >= 2 and any("contract" in p for p in info.value.problems)
    with pytest.raises(forking.ForkError, match="not JSON"):
        forking.parse_workflow("{not json")
    assert Run.objects.count() == before


def test_an_edited_fork_runs_from_its_edit(source, demo_user, monkeypatch):
    from webapp.runs.tasks import execute_run

    monkeypatch.setattr(controls, "_publish", lambda run, lease: None)  # executed here, below
    version = source.current_version
    data = json.loads(forking.editable_text(version))
    data["agents"][0]["prompt"] = (data["agents"][0].get("prompt") or "") + " Look at the jump first."
    fork = forking.fork_run(source, version, forking.parse_workflow(json.dumps(data)), demo_user, iterations=1)
    assert fork.forked_from == source and fork.forked_version == version.number and fork.status == RunStatus.QUEUED
    assert execute_run(fork.pk, fork.lease) == RunStatus.COMPLETED, Run.objects.get(pk=fork.pk).status_reason
    first = fork.versions.order_by("number").first()
    assert first.data["agents"][0]["prompt"].endswith("Look at the jump first.") and "fork" in first.note
    started = fork.events.filter(kind="search_started").first().payload
    assert started["start"]["path"] == "fork" and started["start"]["source"] == f"run {source.pk} v{version.number}"
    assert "edited by a person" in started["start"]["reason"]
