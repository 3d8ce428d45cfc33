"""The Celery app: runs execute here, never in the web process."""
import os
from pathlib import Path

from celery import Celery, signals

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

app = Celery("trellis")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["webapp.runs"])
app.autodiscover_tasks(["webapp.runs"], related_name="training")  # the training queue's task
_beat = None  # this worker's heartbeat thread (webapp/health.py), in its main process only


@signals.worker_init.connect
def _die_with_the_studio(**_):
    """Started by ``manage.py studio``: the worker and its pool go when the studio goes, however."""
    from webapp.process_life import watch_parent

    watch_parent()


@signals.worker_init.connect
def _import_litellm_before_the_pool_forks(**_):
    """litellm takes seconds to import; imported once here, in the main process, every pool
    process inherits it instead of paying for it on its first model call. A training worker
    calls no model: it starts without it."""
    if set(app.amqp.queues.consume_from or ()) == {"training"}:
        return
    from engine.llm import get_litellm

    get_litellm()


@signals.worker_ready.connect
def _start_worker_beat(sender=None, **_):
    """Tell /healthz (and the studio's supervisor) that this worker's main process is alive; a
    worker of the training queue alone tells the runs how many training jobs it takes at once."""
    from webapp.health import TRAINING_KEY, WorkerBeat

    global _beat
    from webapp.disk import reserve

    reserve().ensure()  # given back when a write fails for want of space (webapp/runs/tasks.py)
    name = getattr(sender, "hostname", None) or f"worker-{os.getpid()}"
    queues = set(app.amqp.queues.consume_from or ())
    if queues == {"training"}:
        processes = getattr(getattr(sender, "controller", None), "concurrency", None) or 1
        _beat = WorkerBeat(f"{name}|{processes}", TRAINING_KEY).start()
    else:
        _beat = WorkerBeat(name).start()


@signals.worker_process_init.connect
def _load_the_embedding_model(**_):
    """A run's warm start embeds its task to look it up in the archive; the model takes seconds to
    load, so a runs worker whose archive has entries loads it while it waits for its first run
    (in each pool process: torch is not loaded before the pool forks)."""
    if set(app.amqp.queues.consume_from or ()) == {"training"}:
        return
    from django.conf import settings

    entries = Path(settings.TRELLIS_ARCHIVE_DIR) / "entries"
    try:
        wanted = entries.is_dir() and any(entries.glob("*.json"))
    except OSError:  # unreadable now: the run's own lookup says so
        wanted = False
    if wanted:
        from engine.embedding import load_in_background

        load_in_background()


@signals.worker_process_init.connect
def _pool_process_dies_with_its_worker(**_):
    from webapp.process_life import watch_parent

    watch_parent()


@signals.worker_process_init.connect
def _interruptible(**_):
    """A person's pause or cancel interrupts the run this process executes, mid-step
    (webapp/runs/interrupt.py)."""
    from webapp.runs import interrupt

    interrupt.install()


@signals.worker_process_init.connect
def _pin_training_gpu(**_):
    """A training worker's processes each get a GPU of their own when the studio named them
    (TRELLIS_TRAINING_GPUS=0,1,...: one process per GPU), through CUDA_VISIBLE_DEVICES."""
    gpus = [g.strip() for g in os.environ.get("TRELLIS_TRAINING_GPUS", "").split(",") if g.strip()]
    if not gpus:
        return
    from billiard.process import current_process

    index = getattr(current_process(), "index", 0) or 0
    os.environ["CUDA_VISIBLE_DEVICES"] = gpus[index % len(gpus)]


@signals.worker_shutdown.connect
def _stop_worker_beat(**_):
    if _beat is not None:
        _beat.close()



def declare_queues() -> None:
    """Re-create the run queues and their bindings in a Redis that restarted empty, so that a
    run sent before the worker has reconnected is routed to its queue instead of refused."""
    with app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=3)
        for name in ("runs", "training", app.conf.task_default_queue):
            app.amqp.queues[name](conn.default_channel).declare()
