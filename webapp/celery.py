"""The Celery app: runs execute here, never in the web process."""
import os

from celery import Celery, signals

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

app = Celery("trellis")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["webapp.runs"])
_beat = None  # this worker's heartbeat thread (webapp/health.py), in its main process only


@signals.worker_init.connect
def _import_litellm_before_the_pool_forks(**_):
    """litellm takes seconds to import; imported once here, in the main process, every pool
    process inherits it instead of paying for it on its first model call."""
    from engine.llm import get_litellm

    get_litellm()


@signals.worker_ready.connect
def _start_worker_beat(sender=None, **_):
    """Tell /healthz (and the studio's supervisor) that this worker's main process is alive."""
    from webapp.health import WorkerBeat

    global _beat
    _beat = WorkerBeat(getattr(sender, "hostname", None) or f"worker-{os.getpid()}").start()


@signals.worker_shutdown.connect
def _stop_worker_beat(**_):
    if _beat is not None:
        _beat.close()



def declare_queues() -> None:
    """Re-create the run queues and their bindings in a Redis that restarted empty, so that a
    run sent before the worker has reconnected is routed to its queue instead of refused."""
    with app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=3)
        for name in ("runs", app.conf.task_default_queue):
            app.amqp.queues[name](conn.default_channel).declare()
