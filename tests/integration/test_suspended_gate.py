"""A decision waits for a person without holding a worker: the run is suspended at its
proposal and the decision resumes it there (issue 10). Real studio: Redis, Celery, the engine."""
from __future__ import annotations

import pytest
from django.test import Client

from tests.studio_harness import add_member, wait_for
from webapp.runs import controls
from webapp.runs.models import GatePolicy, MutationStatus, Run, RunStatus
from webapp.tasks import registration
from webapp.teams.models import Project

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _project(user) -> Project:
    project = Project.objects.create(name="Suspension tests")
    add_member(project, user, "reviewer")
    return project


def start_run(task, **options) -> Run:
    """A run without the single-agent baseline after it: these tests are about the gate."""
    return controls.start_run(task, single_agent=False, **options)


def _run(pk: int) -> Run:
    return Run.objects.get(pk=pk)


def _finished(pk: int) -> Run | None:
    r = _run(pk)
    return r if r.status in {"completed", "failed", "cancelled"} else None


def _active_tasks() -> list[dict]:
    from webapp.celery import app

    replies = app.control.inspect(timeout=3).active() or {}
    return [task for tasks in replies.values() for task in tasks]


def test_a_run_waiting_for_a_person_holds_no_worker(studio, light_task, demo_user):
    project = _project(demo_user)
    task = registration.task_for_folder(project, light_task)
    waiting = start_run(task, search="mimosa", iterations=4, gate_policy=GatePolicy.MANUAL)
    pending = wait_for(lambda: waiting.mutations.filter(status=MutationStatus.PROPOSED).first(), 300,
                       what="a mutation to wait for a person")
    wait_for(lambda: _run(waiting.pk).status == RunStatus.AWAITING and not _active_tasks(), 60,
             what="the waiting run to leave the worker")

    # While it waits, the worker is free: another run starts, and finishes, meanwhile.
    other = start_run(registration.task_for_folder(project, light_task), search="mimosa",
                               iterations=1, gate_policy=GatePolicy.AUTOMATIC)
    other = wait_for(lambda: _finished(other.pk), 300, what="the other run to finish")
    assert other.status == RunStatus.COMPLETED, other.status_reason
    assert _run(waiting.pk).status == RunStatus.AWAITING

    # The decision sends it back to the queue; it resumes at that proposal, not before it.
    client = Client()
    client.force_login(demo_user)
    assert client.post(f"/mutations/{pending.pk}/approve", {"reason": "go on"}).status_code == 200

    def decide_the_rest():
        for later in waiting.mutations.filter(status=MutationStatus.PROPOSED):
            client.post(f"/mutations/{later.pk}/veto", {"reason": "enough"})
        return _finished(waiting.pk)

    run = wait_for(decide_the_rest, 400, what="the resumed run to finish")
    assert run.status == RunStatus.COMPLETED, run.status_reason
    pending.refresh_from_db()
    assert pending.status == MutationStatus.APPROVED
    # The approved proposal's workflow became the next version, and no iteration ran twice.
    assert run.versions.filter(hash=pending.child_hash, author="user:ada").exists()
    iterations = sorted(run.events.filter(kind="search_iteration").values_list("payload__n", flat=True))
    assert iterations == sorted(set(iterations)) and iterations[0] == 1
    assert list(run.judgements.filter(iteration=pending.iteration)) , "the waiting proposal's score was kept"


def test_pausing_and_cancelling_a_waiting_run_take_effect_at_once(studio, light_task, demo_user):
    project = _project(demo_user)
    task = registration.task_for_folder(project, light_task)
    # Four iterations: a proposal that breaks the workflow's rules never reaches the gate.
    run = start_run(task, search="mimosa", iterations=4, gate_policy=GatePolicy.MANUAL)
    pending = wait_for(lambda: run.mutations.filter(status=MutationStatus.PROPOSED).first(), 300,
                       what="a mutation to wait for a person")
    wait_for(lambda: _run(run.pk).status == RunStatus.AWAITING, 60, what="the run to wait")
    client = Client()
    client.force_login(demo_user)
    assert client.post(f"/runs/{run.pk}/control/pause").status_code == 200
    assert _run(run.pk).status == RunStatus.PAUSED  # no worker to tell: paused now

    # A decision taken while paused stands, and does not start the run behind the person's back.
    assert client.post(f"/mutations/{pending.pk}/veto", {"reason": "no"}).status_code == 200
    assert _run(run.pk).status == RunStatus.PAUSED
    assert client.post(f"/runs/{run.pk}/control/resume").status_code == 200
    wait_for(lambda: _run(run.pk).status in {RunStatus.AWAITING, RunStatus.COMPLETED}, 300,
             what="the resumed run to reach its next decision or its end")
    pending.refresh_from_db()
    assert pending.status == MutationStatus.VETOED
    assert client.post(f"/runs/{run.pk}/control/cancel").status_code in {200, 409}
    run = wait_for(lambda: _finished(run.pk), 120, what="the run to end")
    assert run.status in {RunStatus.CANCELLED, RunStatus.COMPLETED}
    assert not run.mutations.filter(status=MutationStatus.PROPOSED).exists()


def test_tree_children_pass_the_gate_and_a_promoted_child_is_expanded_next(studio, light_task, demo_user):
    project = _project(demo_user)
    task = registration.task_for_folder(project, light_task)
    run = start_run(task, search="tree", iterations=2, gate_policy=GatePolicy.MANUAL)
    client = Client()
    client.force_login(demo_user)
    first = wait_for(lambda: run.mutations.filter(status=MutationStatus.PROPOSED).first(), 300,
                     what="the first child to wait for a person")
    assert first.gate.search == "tree" and first.gate.code and first.gate.can_promote
    assert client.post(f"/mutations/{first.pk}/promote", {"reason": "try more of this"}).status_code == 200
    vetoed = []

    def veto_the_rest():
        for later in run.mutations.filter(status=MutationStatus.PROPOSED):
            client.post(f"/mutations/{later.pk}/veto", {"reason": "no"})
            vetoed.append(later.child_hash)
        return _finished(run.pk)

    done = wait_for(veto_the_rest, 600, what="the tree run to finish")
    assert done.status == RunStatus.COMPLETED, done.status_reason
    nodes = {e["node"]: e for e in run.events.filter(kind="tree_node").values_list("payload", flat=True)}
    assert nodes[first.child_hash]["promoted"] and nodes[first.child_hash]["decided_by"] == "user:ada"
    # The promoted child was a parent in iteration 2; vetoed children never were, nor champions.
    parents = [p for e in run.events.filter(kind="search_iteration", payload__phase="started")
               .values_list("payload", flat=True) if e for p in e.get("parents", [])]
    assert first.child_hash in parents
    assert not set(vetoed) & set(parents)
    assert done.result["final"].get("node") not in vetoed


def test_a_tree_search_killed_mid_iteration_resumes_from_its_checkpoint(studio, light_task, demo_user, settings):
    settings.TRELLIS_HEARTBEAT_STALE_S = 3
    project = _project(demo_user)
    task = registration.task_for_folder(project, light_task)
    run = start_run(task, search="tree", iterations=2, gate_policy=GatePolicy.AUTOMATIC)
    wait_for(lambda: (_run(run.pk).checkpoint or {}).get("n", -1) >= 1, 400, what="iteration 1 to be persisted")
    wait_for(lambda: run.events.filter(kind="debate_turn", iteration=2).exists(), 200, what="iteration 2 to start")
    studio.kill_worker()
    before = _run(run.pk)
    nodes_before = before.checkpoint["search"]["tree"]["nodes"]
    wait_for(lambda: _run(run.pk).worker_lost, 20, what="the run to show its worker is lost")
    studio.start_worker()
    controls.resume_run(_run(run.pk))
    run = wait_for(lambda: _finished(run.pk), 600, what="the resumed tree run to finish")

    assert run.status == RunStatus.COMPLETED, run.status_reason
    started = list(run.events.filter(kind="search_started").values_list("payload", flat=True))
    assert [p.get("resumed_after") for p in started] == [None, before.checkpoint["n"]]
    final_tree = run.checkpoint["search"]["tree"]["nodes"]
    # Every node from before the kill is still in the tree, unchanged in score, and the root
    # was not built again.
    after = {n["id"]: n for n in final_tree}
    assert all(after[n["id"]]["score"] == n["score"] for n in nodes_before)
    assert sum(1 for n in final_tree if n["parent"] is None) == 1
    assert run.result["final"]["official"]["ok"]
