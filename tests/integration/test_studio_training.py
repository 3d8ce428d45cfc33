"""Training jobs on the studio's Celery ``training`` queue, with its real parts: the embedded
Redis, a training worker process (as ``manage.py studio`` starts it), the run's events stored
and broadcast by RunEventSink. This test process plays the run's worker: it hands the job to
the queue through CeleryJobHost and waits for it, as tasks.execute_run does."""
from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from engine.errors import RunInterrupted
from engine.sandbox import ExecutionLimits, ExecutionRequest
from engine.sandbox.subprocess_executor import SubprocessExecutor
from engine.trace import Tracer
from engine.training.folder import JobFolder, job_key
from engine.training.jobs import TrainingExecutor, hosting_jobs, tracing_to
from tests.integration.test_training_jobs import _program
from tests.studio_harness import running_run, wait_for
from webapp.runs.bridge import RunEventSink
from webapp.runs.models import Run, RunStatus
from webapp.runs.training import CeleryJobHost

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def training_studio(studio):
    studio.start_training_worker(1)
    yield studio
    studio.stop_training_worker()


def _run_with_folder(light_task, name: str) -> Run:
    from django.conf import settings

    run = running_run(light_task, name)
    run.run_dir = str(Path(settings.TRELLIS_RUNS_DIR) / f"training-test-{run.pk}-{time.monotonic_ns()}")
    run.save(update_fields=["run_dir"])
    return run


def _request(code: str) -> ExecutionRequest:
    return ExecutionRequest(code=code, limits=ExecutionLimits(wall_seconds=120, cpu_seconds=120))


def _payloads(run: Run, kind: str) -> list[dict]:
    return list(run.events.filter(kind=kind).order_by("seq").values_list("payload", flat=True))


def test_a_job_trains_on_the_training_queue_and_resumes_when_its_worker_process_is_killed(training_studio,
                                                                                           light_task):
    run = _run_with_folder(light_task, "Training queue")
    run_dir = Path(run.run_dir)
    code = _program(epochs=10, pause=0.5)
    executor = TrainingExecutor(SubprocessExecutor(run_dir / "sandboxes"), run_dir / "training", device="cpu")
    folder = JobFolder(run_dir / "training", job_key(_request(code)))
    killed: dict = {}

    def kill_the_pool_process_mid_job():
        try:
            wait_for(lambda: (s := folder.load()).status == "running" and s.checkpoint and s.checkpoint["epoch"] >= 2,
                     60, interval=0.05, what="two checkpoints")
            pools = training_studio.training_pool_pids()
            killed["pids"], killed["epoch"] = pools, folder.load().checkpoint["epoch"]
            for pid in pools:
                os.kill(pid, signal.SIGKILL)  # the process running the job, not the worker
        except BaseException as exc:  # noqa: BLE001 - reported by the assertions below
            killed["error"] = exc

    threading.Thread(target=kill_the_pool_process_mid_job, daemon=True).start()
    with tracing_to(Tracer("probe-1", [RunEventSink(run, run.lease)])), hosting_jobs(CeleryJobHost(run.pk, run.lease)):
        result = executor.run(_request(code))

    assert "error" not in killed, killed.get("error")
    assert killed["pids"] and os.getpid() not in killed["pids"]
    assert result.ok, result.stderr
    assert '"w"' in result.stdout and result.workdir.is_relative_to(run_dir / "sandboxes")
    log = (training_studio.logs / "training.log").read_text()
    assert "webapp.runs.training.train" in log and "WorkerLostError" in log  # it ran there, and was lost there

    # Its events reached the run (Event rows, pushed live), in order: a start, a second start
    # from the last checkpoint kept before the kill, and the epochs going on from there.
    started = _payloads(run, "training_started")
    assert len(started) == 2 and started[0]["resumed_epoch"] is None
    resumed = started[1]["resumed_epoch"]
    assert resumed is not None and resumed >= killed["epoch"]
    epochs = [p["epoch"] for p in _payloads(run, "training_progress")]
    assert epochs.count(0) == 1 and epochs[-1] == 9  # not restarted from scratch
    after = epochs[max(i for i, e in enumerate(epochs) if e == resumed) + 1:]
    assert after == list(range(resumed + 1, 10))
    assert [f["status"] for f in _payloads(run, "training_finished")] == ["ok"]
    assert f"resumed at {resumed + 1}" in result.stdout
    assert folder.load().status == "ok"


def test_a_paused_run_stops_its_job_on_the_training_worker(training_studio, light_task):
    run = _run_with_folder(light_task, "Training queue pause")
    run_dir = Path(run.run_dir)
    code = _program(epochs=40, pause=0.3)
    executor = TrainingExecutor(SubprocessExecutor(run_dir / "sandboxes"), run_dir / "training", device="cpu")
    folder = JobFolder(run_dir / "training", job_key(_request(code)))

    def pause_the_run():
        wait_for(lambda: folder.load().checkpoint is not None, 60, interval=0.05, what="a checkpoint")
        Run.objects.filter(pk=run.pk).update(status=RunStatus.PAUSING)

    threading.Thread(target=pause_the_run, daemon=True).start()
    started = time.monotonic()
    with tracing_to(Tracer("probe-1", [RunEventSink(run, run.lease)])), \
            hosting_jobs(CeleryJobHost(run.pk, run.lease)), pytest.raises(RunInterrupted):
        executor.run(_request(code))
    assert time.monotonic() - started < 30  # it did not train its 40 epochs first
    wait_for(lambda: folder.load().status == "paused", 20, what="the job to stop on the worker")
    assert folder.command() == "stop"  # the engine's, cleared when the resumed run runs it again
    assert _payloads(run, "training_finished")[-1]["status"] == "paused"


def test_healthz_tells_the_training_worker_s_slots_and_stays_well_without_one(training_studio):
    import json
    import urllib.request

    def health() -> dict:
        try:
            with urllib.request.urlopen(training_studio.url + "/healthz", timeout=5) as r:
                return json.load(r)
        except urllib.error.HTTPError as err:  # 503: unwell, still a JSON body
            return json.load(err)

    assert {k: health()[k] for k in ("training", "training_slots", "ok")} == \
        {"training": "ok", "training_slots": 1, "ok": True}
    training_studio.stop_training_worker()
    gone = wait_for(lambda: (h := health())["training"] == "none" and h, 30, what="the training worker to leave /healthz")
    assert gone["training_slots"] == 0 and gone["ok"] is True  # jobs then train in the runs' worker
