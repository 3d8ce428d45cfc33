"""Training jobs in the studio: the Celery ``training`` queue, the run that waits on its jobs,
and what the run page's Training panel shows and controls.

- A run's worker (``tasks.execute_run``) hands each training program to ``CeleryJobHost``
  (installed around the task by the signals below): while a training worker is alive the job
  goes to the ``training`` queue as a ticket (engine/training/remote.py) and the run waits,
  forwarding the job's events into its own trace (so they become Event rows and live
  messages like any other), keeping its heartbeat and reading its pause/cancel; with no
  training worker the job runs in the run's own worker, as in the CLI.
- ``train``: the training worker's task, acknowledged late and rejected when its process is
  lost, so a worker killed with ``kill -9`` has the ticket delivered again; the job goes on
  from its last checkpoint. One process per device (``manage.py studio``).
- ``jobs_state`` and ``control_job``: the panel's job list and its Pause / Cancel / Resume.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path

from celery import shared_task
from celery.signals import task_postrun, task_prerun
from django.conf import settings
from django.db import connection
from django.utils import timezone

from engine.search.base import THREAD_EXIT_HOOKS
from engine.training import folder as job_folder
from engine.training import jobs as engine_jobs
from engine.training import remote, worker
from webapp import health

from .bridge import RunControl, broadcast
from .models import Run

log = logging.getLogger(__name__)
HEARTBEAT_S = 5.0             # how often a run waiting on a job says it is alive
MAX_POINTS_SHOWN = 2000       # points per curve sent to a page on load (the trace has them all)


class TrainingRefused(Exception):
    """The action does not apply to the job as it is (409), or there is no such job (404)."""

    def __init__(self, message: str, status: int = 409):
        super().__init__(message)
        self.http_status = status


# --- the run's side: a JobHost on the Celery queue --------------------------------------------------------
class CeleryJobHost:
    """engine.training.jobs.JobHost for one attempt of a run (its lease)."""

    def __init__(self, run_id: int, lease: str) -> None:
        self.run_id, self.lease = run_id, lease
        self.control = RunControl(Run(pk=run_id), lease)
        self._beat = 0.0

    def slots(self) -> int:
        try:
            return health.live_training_slots()
        except Exception:  # noqa: BLE001 - Redis down: the job runs here, as without workers
            log.warning("training: could not count the training workers; the job runs in the run's worker")
            return 0

    def send(self, spec: dict) -> None:
        send(spec)

    def waiting(self) -> None:
        self.control.check()  # raises RunInterrupted: a person paused or cancelled the run
        now = time.monotonic()
        if now - self._beat >= HEARTBEAT_S:  # no events while a job is queued or paused
            self._beat = now
            Run.objects.filter(pk=self.run_id, lease=self.lease).update(heartbeat=timezone.now())


def send(spec: dict) -> None:
    train.apply_async((spec,), queue="training", retry=True,
                      retry_policy={"max_retries": 3, "interval_start": 0.2, "interval_step": 0.4, "interval_max": 1.0})


@task_prerun.connect
def _host_jobs_of_this_run(task_id=None, task=None, args=(), **_):
    """A run's training jobs go through the training queue: the host is set in the pool
    process's context for the task's duration (engine.training.jobs reads it per job)."""
    if getattr(task, "name", "") == "webapp.runs.tasks.execute_run" and len(args) == 2:
        engine_jobs.set_job_host(CeleryJobHost(int(args[0]), str(args[1])))


@task_postrun.connect
def _forget_host(task_id=None, task=None, **_):
    if getattr(task, "name", "") == "webapp.runs.tasks.execute_run":
        engine_jobs.set_job_host(None)


def _close_thread_connection() -> None:
    """A search that probes candidates in threads (several training workers) ends each thread
    here: the database connection its events and controls opened is closed with it."""
    connection.close()


if _close_thread_connection not in THREAD_EXIT_HOOKS:
    THREAD_EXIT_HOOKS.append(_close_thread_connection)


# --- the training worker's side ----------------------------------------------------------------------------
@shared_task(name="webapp.runs.training.train", acks_late=True, reject_on_worker_lost=True)
def train(spec: dict) -> str:
    """Run one job ticket (engine.training.worker.work); only inside the studio's runs folder."""
    root = Path(str(spec.get("root", ""))).resolve()
    runs = Path(settings.TRELLIS_RUNS_DIR).resolve()
    if runs not in root.parents:
        log.error("training: refused a ticket outside the runs folder: %s", root)
        return "refused"
    also = _live(int(spec["run"])) if spec.get("alone") and isinstance(spec.get("run"), int) else None
    return worker.work(spec, also=also)


def _live(run_id: int):
    """A job no run waits on has no trace to go to: its events go to the run's page live (the
    job's state.json keeps its curve for a later visit)."""
    def push(payload) -> None:
        broadcast(run_id, {"kind": payload.kind, "seq": None, "agent": "trainer", "iteration": None, "source": "job",
                           "ts": time.time(), "data": payload.to_payload()})
    return push


# --- the panel ------------------------------------------------------------------------------------------------
def jobs_root(run: Run) -> Path | None:
    return Path(run.run_dir) / "training" if run.run_dir else None


def job_row(folder: job_folder.JobFolder, state: job_folder.JobState) -> dict:
    """One job as the panel shows it: progress, ETA, best validation, its curve, and which of
    Pause / Cancel / Resume apply."""
    command = folder.command()
    status = state.status
    progress = None
    if state.epochs and state.epoch is not None:
        progress = round(min(max((state.epoch + 1) / state.epochs, 0.0), 1.0), 4)
    points = [p for p in state.points if p.get("epoch") is not None][-MAX_POINTS_SHOWN:]
    waited = bool(remote.open_tickets(folder))
    # a job no run waits on resumes on a training worker, from the request it kept
    alone = not waited and status in ("paused", "cancelled") and folder.kept_request() is not None
    return {"job": state.key, "purpose": state.purpose, "node": state.node, "status": status, "device": state.device,
            "epoch": state.epoch, "epochs": state.epochs, "progress": progress,
            "eta_s": state.eta_s if status == "running" else None, "best_val": state.best_val,
            "checkpoint_epoch": (state.checkpoint or {}).get("epoch"), "runs": state.runs, "command": command,
            "first_epoch": state.first_epoch,
            "waited_on": waited, "points": points,
            "can": {"pause": status in ("running", "queued") and command is None,
                    "cancel": status in ("running", "queued", "paused") and command != "cancel",
                    "resume": (status == "paused" and command == "pause" and waited) or alone}}


def jobs_state(run: Run) -> dict:
    root = jobs_root(run)
    rows = []
    if root is not None:
        for state in job_folder.list_jobs(root):
            rows.append(job_row(job_folder.JobFolder(root, state.key), state))
    return {"jobs": rows}


def control_job(run: Run, key: str, action: str) -> str:
    """A person's Pause, Cancel or Resume of one of the run's jobs; returns what happened, in
    words. Pause and cancel are commands the job's watcher reads (within a second); resume
    clears the command and sends again the ticket a run waits on."""
    root = jobs_root(run)
    if root is None or not key.isalnum() or len(key) > 64 or not (root / key / "state.json").is_file():
        raise TrainingRefused("no such training job in this run", 404)
    folder = job_folder.JobFolder(root, key)
    row = job_row(folder, folder.load())
    if action not in ("pause", "cancel", "resume"):
        raise TrainingRefused(f"unknown action {action[:20]!r}", 404)
    if not row["can"][action]:
        raise TrainingRefused(f"this job is {row['status']}" + (f" ({row['command']} asked)" if row["command"] else "")
                              + f"; it cannot be {'resumed' if action == 'resume' else action + 'd'} now")
    if action in ("pause", "cancel"):
        folder.send(action)
        return f"{action} asked: the job stops within a second" + (", keeping its last checkpoint"
                                                                  if action == "pause" else "")
    if remote.resend(folder, send):
        return "resumed: the job goes on from its last checkpoint, for the run waiting on it"
    if CeleryJobHost(run.pk, "").slots() <= 0:
        raise TrainingRefused("no run waits on this job and no training worker is running to take it alone; "
                              "start the studio's training worker, or resume its run", 503)
    remote.send_alone(folder, send, run=run.pk)
    return "resumed on a training worker from its last checkpoint; no run waits on it, what it trains is kept"
