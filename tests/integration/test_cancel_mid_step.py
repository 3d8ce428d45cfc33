"""Issue 37, items 7 and 12: pause and cancel were read only at the engine's step boundaries, so a
step that ran long without one (a law the reader chewed on at 100 % CPU past 120 s, a program or
an evaluate.py that takes its whole wall clock) kept the run going: Cancel could not interrupt it
and Pause took 42.5 s. The studio now signals the pool process executing the run, which stops at
once. Real studio: Redis, a Celery worker, the sandbox."""
from __future__ import annotations

import multiprocessing
import os
import shutil
import time

import psutil
import pytest

from tests.studio_harness import add_member, wait_for
from webapp.runs import controls, interrupt
from webapp.runs.models import GatePolicy, Run, RunStatus
from webapp.tasks import registration
from webapp.teams.models import Project

SLOW_FOLD = '''
_load_truth = load_truth


def load_truth(path):  # a validation fold (fewer rows than the training set) takes its whole wall clock
    truth = _load_truth(path)
    if 60 < len(truth) < 150:  # preflight scores 50 rows; a fold of the light task about 100
        import time
        time.sleep(600)
    return truth


'''


@pytest.fixture
def slow_scoring(light_task, tmp_path):
    folder = tmp_path / "slow-scoring"
    shutil.copytree(light_task, folder)
    evaluate = folder / "evaluate.py"
    head, guard, tail = evaluate.read_text().rpartition('if __name__ == "__main__":')
    evaluate.write_text(head + SLOW_FOLD + guard + tail)
    return folder


def _scoring_folds() -> bool:
    """A sandboxed evaluate.py that has been running for seconds: this test's slow fold. Another
    test worker's evaluate.py (a real search beside this one) takes well under a second."""
    for process in psutil.process_iter(["cmdline", "create_time"]):
        cmdline = process.info["cmdline"] or ()
        if any("evaluate.py" in part for part in cmdline) and any("_bootstrap" in part for part in cmdline) \
                and time.time() - (process.info["create_time"] or time.time()) > 3:
            return True
    return False


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("action, settles", [("cancel", RunStatus.CANCELLED), ("pause", RunStatus.PAUSED)])
def test_a_person_stops_a_run_in_the_middle_of_a_long_step(studio, slow_scoring, demo_user, action, settles):
    project = Project.objects.get_or_create(name=f"Stop mid-step {action}")[0]
    add_member(project, demo_user, "reviewer")
    task = registration.task_for_folder(project, slow_scoring)
    run = controls.start_run(task, search="mimosa", iterations=1, gate_policy=GatePolicy.AUTOMATIC,
                             single_agent=False, executor="subprocess")
    wait_for(lambda: Run.objects.get(pk=run.pk).status == RunStatus.RUNNING and _scoring_folds(), 240,
             what="the run running, and a validation fold's slow evaluate.py with it")
    asked = time.monotonic()
    (controls.cancel_run if action == "cancel" else controls.pause_run)(Run.objects.get(pk=run.pk))
    stopped = wait_for(lambda: (r := Run.objects.get(pk=run.pk)).status == settles and r, 30,
                       what=f"the run to be {settles} (the step it was in lasts minutes)")
    assert time.monotonic() - asked < 30
    assert stopped.status_reason in ("", "paused", "cancelled") or settles in stopped.status_reason
    wait_for(lambda: not _scoring_folds(), 30, what="the interrupted program to be gone")
    if action == "pause":
        assert stopped.can_resume


def _spin(queue) -> None:
    interrupt.install()
    try:
        with interrupt.armed():
            queue.put("spinning")
            while True:  # pure Python at 100 % CPU: no step boundary ever comes
                sum(i * i for i in range(1000))
    except BaseException as exc:  # noqa: BLE001
        queue.put(type(exc).__name__ + ":" + getattr(exc, "reason", ""))


def _signalled(target, signum: int) -> tuple[list[str], int | None]:
    """``target(queue)`` in a forked process, sent ``signum`` once it said it is ready: what it
    said, and how it exited."""
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=target, args=(queue,))
    child.start()
    said = [queue.get(timeout=30)]
    os.kill(child.pid, signum)
    said.append(queue.get(timeout=10))
    child.join(10)
    return said, child.exitcode


def test_the_signal_interrupts_pure_python_at_full_cpu():
    said, _ = _signalled(_spin, interrupt.CANCEL_SIGNAL)
    assert said == ["spinning", "RunInterrupted:cancelled"]


def _idle(queue) -> None:
    interrupt.install()
    queue.put("ready")
    time.sleep(1)
    queue.put("finished")


def test_a_signal_outside_the_engine_is_ignored():
    said, exitcode = _signalled(_idle, interrupt.PAUSE_SIGNAL)
    assert said == ["ready", "finished"] and exitcode == 0
