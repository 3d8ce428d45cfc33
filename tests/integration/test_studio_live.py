"""The studio end to end with its real parts: embedded Redis as broker and channel layer, a
Celery worker process executing the engine, the test database shared with it."""
from __future__ import annotations

import pytest
from django.test import Client

from engine.mutations import Mutation as EngineMutation
from engine.workflow import Workflow
from tests.studio_harness import add_member, wait_for
from webapp.runs import controls
from webapp.runs.models import GatePolicy, MutationStatus, Run, RunStatus
from webapp.tasks import registration
from webapp.teams.models import Project

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _start(light_task, reviewer=None, **options) -> Run:
    project = Project.objects.create(name="Live tests")
    if reviewer:  # the person who decides and controls the run must be one of its project's reviewers
        add_member(project, reviewer, "reviewer")
    task = registration.task_for_folder(project, light_task)
    # the single-agent baseline is the browser test's to show; here it would only add a run
    return controls.start_run(task, **{"single_agent": False, **options})


def _run(pk: int) -> Run:
    return Run.objects.get(pk=pk)


def _finish(run: Run, timeout: float = 300) -> Run:
    return wait_for(lambda: (r := _run(run.pk)).status in {"completed", "failed", "cancelled"} and r,
                    timeout, what=f"run {run.pk} to finish")


def test_a_person_edits_approves_and_vetoes_and_each_is_applied_once_in_order(studio, light_task, demo_user):
    # Four iterations: a mutator proposal that breaks the workflow's rules is refused by the
    # engine before it reaches anyone, so not every iteration brings a mutation to decide.
    # From the team: the archive is not what this test is about (a task new to it is embedded
    # first, a model load before the first call).
    run = _start(light_task, demo_user, search="mimosa", iterations=4, gate_policy=GatePolicy.MANUAL, start="team")
    client = Client()
    client.force_login(demo_user)

    first = wait_for(lambda: run.mutations.filter(status=MutationStatus.PROPOSED).first(), 240,
                     what="the first mutation to wait for a person")
    assert _run(run.pk).status == RunStatus.AWAITING  # a pending mutation pauses this run
    # While it waits, the person writes their own change (v2), and only then approves the proposal:
    # the approval was lost once (the resumed search adopted the edit in its place).
    saved = client.post(f"/runs/{run.pk}/editor", {"kind": "procedure", "role": "planner",
                                                   "procedure": "Look at the jump before fitting anything.",
                                                   "note": "my prior"})
    assert saved.status_code == 200 and b"Saved as v2" in saved.content
    assert client.post(f"/mutations/{first.pk}/approve", {"reason": "clearer procedure"}).status_code == 200

    second = wait_for(lambda: run.mutations.filter(status=MutationStatus.PROPOSED,
                                                   iteration__gt=first.iteration).first(), 480,
                      what="the second mutation")
    assert client.post(f"/mutations/{second.pk}/veto", {"reason": "not convinced"}).status_code == 200

    def vetoed_the_rest_or_finished():
        for later in run.mutations.filter(status=MutationStatus.PROPOSED):
            client.post(f"/mutations/{later.pk}/veto", {"reason": "enough for today"})
        r = _run(run.pk)
        return r.status in {"completed", "failed", "cancelled"} and r

    run = wait_for(vetoed_the_rest_or_finished, 600, what=f"run {run.pk} to finish")

    assert run.status == RunStatus.COMPLETED, run.status_reason
    first.refresh_from_db(), second.refresh_from_db()
    assert (first.status, first.decided_by, first.reason) == ("approved", "user:ada", "clearer procedure")
    assert (second.status, second.decided_by) == ("vetoed", "user:ada")
    versions = list(run.versions.order_by("number"))
    # The edit (v2) waited; the approved mutation became v3; the edit was then applied on top of it
    # as v4, once; the vetoed one left no version.
    assert [v.number for v in versions] == [1, 2, 3, 4]
    edit, approved, both = versions[1], versions[2], versions[3]
    assert approved.hash == first.child_hash and approved.author == "user:ada"
    assert edit.adopted and edit.outcome.startswith("applied again on top of v3 as v4")
    change = EngineMutation.from_dict(edit.change)
    assert both.parent == approved and both.author == "user:ada" and both.hash == change.apply(
        Workflow.from_dict({**approved.data, "hash": None})).hash
    assert both.data["harness"]["procedures"]["planner"] == "Look at the jump before fitting anything."
    assert run.result["final"]["workflow_hash"] == both.hash
    assert run.mutations.filter(child_hash=first.child_hash).count() == 1  # never proposed again
    assert run.result["initial"]["official"]["ok"] and run.result["final"]["official"]["ok"]
    judged = sorted(run.judgements.values_list("iteration", flat=True))
    assert judged[0] == 0 and first.iteration in judged and second.iteration in judged
    assert run.events.filter(kind="agent_started").count() >= 3 * 6  # every agent of three probes


def test_a_worker_killed_mid_run_resumes_from_its_last_step(studio, light_task, settings):
    settings.TRELLIS_HEARTBEAT_STALE_S = 3
    run = _start(light_task, search="mimosa", iterations=3, gate_policy=GatePolicy.AUTOMATIC)
    wait_for(lambda: (_run(run.pk).checkpoint or {}).get("n", -1) >= 1, 300, what="iteration 1 to be persisted")
    # Kill it inside a later iteration's probe, not between steps. A proposal that breaks the
    # workflow's rules is refused without a probe, so that probe may be iteration 2's or 3's.
    wait_for(lambda: run.events.filter(kind="agent_started", iteration__gte=2).exists(), 300,
             what="a probe after iteration 1 to start")
    studio.kill_worker()
    before = _run(run.pk)
    kept = list(run.events.order_by("seq").values_list("seq", "kind", "agent")[:200])
    assert before.status in {RunStatus.RUNNING, RunStatus.AWAITING}
    wait_for(lambda: _run(run.pk).worker_lost, 20, what="the run to show its worker is lost")
    assert _run(run.pk).can_resume

    studio.start_worker()
    controls.resume_run(_run(run.pk))
    run = _finish(run)

    assert run.status == RunStatus.COMPLETED, run.status_reason
    assert run.attempts == 2
    # Nothing lost: the events from before the kill are all still there, in order, and the
    # resumed attempt started after iteration 1 instead of from scratch.
    assert list(run.events.order_by("seq").values_list("seq", "kind", "agent")[:len(kept)]) == kept
    started = list(run.events.filter(kind="search_started").values_list("payload", flat=True))
    assert [p.get("resumed_after") for p in started] == [None, before.checkpoint["n"]]
    iterations = sorted(run.events.filter(kind="search_iteration").values_list("payload__n", flat=True))
    assert iterations == [1, 2, 3]
    # Each probe was judged once: none was judged again after the resume. (An iteration whose
    # proposal broke the workflow's rules has no probe and no judgement.)
    judged = sorted(run.judgements.values_list("iteration", flat=True))
    assert judged == sorted(set(judged)) and judged[0] == 0 and set(judged) <= {0, 1, 2, 3}
    assert set(judged) > {0}
    assert run.result["final"]["official"]["ok"]


def test_pause_then_resume_and_cancel_from_the_browser_endpoints(studio, light_task, demo_user):
    run = _start(light_task, demo_user, search="mimosa", iterations=2, gate_policy=GatePolicy.AUTOMATIC)
    client = Client()
    client.force_login(demo_user)
    wait_for(lambda: _run(run.pk).status == RunStatus.RUNNING and run.events.exists(), 120, what="the run to start")
    assert client.post(f"/runs/{run.pk}/control/pause").status_code == 200
    wait_for(lambda: _run(run.pk).status == RunStatus.PAUSED, 120, what="the pause to take effect")
    paused_at = _run(run.pk).last_seq
    assert client.post(f"/runs/{run.pk}/control/pause").status_code == 409  # not running: a clear refusal
    assert _run(run.pk).last_seq == paused_at  # nothing runs while paused

    assert client.post(f"/runs/{run.pk}/control/resume").status_code == 200
    wait_for(lambda: _run(run.pk).last_seq > paused_at, 120, what="the run to continue")
    assert client.post(f"/runs/{run.pk}/control/cancel").status_code == 200
    run = _finish(run)
    assert run.status == RunStatus.CANCELLED
    assert run.attempts == 2
