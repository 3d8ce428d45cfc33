"""python manage.py studio — the whole studio on one machine, no external service:
an embedded Redis (broker + channel layer), a Celery worker, the ASGI web server, and a demo
project with a run already going on an example task with the offline provider."""
from __future__ import annotations

import os
import signal
import socket
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from engine.sandbox.capped_folder import unmount_orphans
from engine.search import registry
from engine.training.jobs import visible_gpus
from webapp import embedded_redis
from webapp.disk import state as disk_state
from webapp.health import report
from webapp.process_life import DIE_WITH_STUDIO
from webapp.runs import controls
from webapp.supervisor import Child, GaveUp, Supervisor, stop_children
from webapp.tasks import registration
from webapp.teams.models import Membership, Project, Role

from ...models import GatePolicy, Run, RunStatus


class Command(BaseCommand):
    help = "Start the Trellis studio (embedded Redis, a Celery worker, the web server) with a live demo run."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--no-demo", action="store_true", help="do not start a demo run")
        parser.add_argument("--demo-task", default=str(Path(settings.TRELLIS_EXAMPLES_DIR) / "diabetes-progression"))
        parser.add_argument("--workers", type=int, default=2, help="runs executed at once by the embedded worker")
        parser.add_argument("--web-processes", type=int, default=None,
                            help="ASGI web processes sharing the port (default: one per two cores, up to 4)")
        parser.add_argument("--training-workers", type=int, default=None,
                            help="training jobs run at once by the training worker (default: one per GPU, "
                                 "or 1 on a machine without one; 0: jobs run in the runs' own worker)")

    def handle(self, *args, **options):
        _stop_on_signals()
        call_command("migrate", interactive=False, verbosity=0)
        # One listening socket, bound first (a port in use is said before anything starts), that
        # every web process accepts on: a restarted one takes the same socket, and no connection
        # is refused meanwhile.
        listener = web_listener(options["host"], options["port"])
        embedded = settings.EMBEDDED_REDIS
        redis = None
        if embedded:
            redis = embedded_redis.EmbeddedRedis(settings.VAR_DIR, die_with_parent=True).start()
            self.stdout.write(f"embedded Redis on {redis.socket} (password in {redis.socket.parent / 'password'})")
        env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "DJANGO_SETTINGS_MODULE": "webapp.settings",
               "TRELLIS_STUDIO_HOST": options["host"],  # the settings allow the host it serves on
               DIE_WITH_STUDIO: "1"}  # its workers go with it, however it goes (webapp/process_life.py)
        # Each in a process group of its own: the supervisor restarts the worker (and the web
        # server) when its main process dies, killing what it left behind first.
        children = [
            Child("worker", [sys.executable, "-m", "celery", "-A", "webapp", "worker", "-Q", "runs,celery",
                             "-c", str(options["workers"]), "--loglevel", "WARNING", "-n", "trellis-embedded@%h"],
                  env, settings.BASE_DIR),
        ]
        children += web_servers(env, listener, options["web_processes"] or default_web_processes(),
                                host=options["host"], port=options["port"])
        training = training_worker(env, options["training_workers"])
        if training is not None:
            children.append(training)
            self.stdout.write(f"training worker: {training.argv[training.argv.index('-c') + 1]} job(s) at once"
                              + (f" on GPU(s) {training.env['TRELLIS_TRAINING_GPUS']}"
                                 if training.env.get("TRELLIS_TRAINING_GPUS") else " on the CPU"))
        for child in children:
            # Killed outright, the studio still takes its parts with it: a worker's cold shutdown
            # (SIGQUIT) ends the runs its pool executes at once; they resume from their checkpoints.
            child.death_signal = signal.SIGTERM if child.name.startswith("web") else signal.SIGQUIT
        # Another broker may have other workers: then a restart of ours resumes nothing by itself.
        supervisor = Supervisor(children, redis, on_restart=self._after_restart if embedded else lambda name: None,
                                say=lambda text: self.stderr.write(text))
        _unmount_left_sandboxes()  # a studio killed outright last time
        try:
            for child in children:
                child.start()
            if embedded:
                resumed = controls.recover_orphans()
                if resumed:
                    self.stdout.write(f"resuming run(s) {', '.join(map(str, resumed))} from their last checkpoint")
            user, password = self._demo_account()
            run = None if options["no_demo"] else self._demo_run(options["demo_task"], user)
            url = f"http://{options['host']}:{options['port']}/"
            self._wait_for_health(url + "healthz", supervisor)
            self.stdout.write(self.style.SUCCESS(f"\nTrellis studio: {url}"))
            self.stdout.write(f"sign in as {user.username!r} with password {password!r}" if password
                              else f"sign in as {user.username!r}")
            if run:
                self.stdout.write(f"demo run: {url}runs/{run.pk}/ ({run.task.name}, {run.get_search_display()}, "
                                  f"gate: {run.get_gate_policy_display().lower()})")
            self.stdout.write("Ctrl-C stops everything.\n")
            self._supervise(supervisor)
        finally:
            stop_children(children, 10, say=self.stdout.write, **self._stopping_note())
            _unmount_left_sandboxes()  # the programs killed with the worker left their folders mounted
            if listener:
                listener.close()
            if redis:
                redis.stop()

    def _stopping_note(self) -> dict:
        """A run the worker is executing cannot finish in a warm shutdown's wait: it resumes from its
        last checkpoint at the next start, so the worker is given 3 s, not 10, and that is said."""
        try:
            running = list(Run.objects.filter(status=RunStatus.RUNNING).values_list("pk", flat=True)[:10])
        except Exception:  # noqa: BLE001 - a database that is gone says nothing here
            return {}
        if not running:
            return {}
        runs = ", ".join(map(str, running))
        self.stdout.write(f"run(s) {runs} in flight: stopped now, each resumes from its last checkpoint "
                          "when the studio starts again")
        return {"grace": {"worker": 3.0}, "why": {"worker": f"executing run(s) {runs}"}}

    def _after_restart(self, part: str) -> None:
        resumed = controls.after_restart(part)
        if resumed:
            self.stdout.write(f"after restarting {part}: run(s) {', '.join(map(str, resumed))} sent to the worker again")

    def _demo_account(self):
        User = get_user_model()
        user = User.objects.filter(username="demo").first()
        if user:
            return user, ("demo" if user.check_password("demo") else None)
        return User.objects.create_superuser("demo", "demo@localhost", "demo"), "demo"

    def _demo_run(self, folder: str, user) -> Run:
        project, _ = Project.objects.get_or_create(
            name="Demo project", defaults={"description": "Example tasks run offline with the scripted provider."})
        # The demo user owns the demo project (a superuser could see it anyway; this keeps it so
        # if the account is ever made an ordinary one).
        Membership.objects.update_or_create(project=project, user=user, defaults={"role": Role.OWNER})
        task = registration.task_for_folder(project, folder)
        active = Run.objects.filter(task=task).exclude(status__in=["completed", "cancelled", "failed"]).first()
        if active:
            return active
        return controls.start_run(task, user, search=registry.DEFAULT, iterations=4, gate_policy=GatePolicy.MANUAL)

    def _wait_for_health(self, url: str, supervisor: Supervisor, timeout_s: float = 120) -> None:
        """Print the URL only once the web server answers and Redis, the database and the
        worker are all healthy."""
        deadline = time.monotonic() + timeout_s
        state = "no answer"
        while time.monotonic() < deadline:
            supervisor.check()
            health = report()
            disk_only = health["disk"] == "full" and health["ok"] is False and _well_but_for_disk(health)
            if not health["ok"] and not disk_only:  # asked here first: each 503 is logged as an error
                state = str(health)
                time.sleep(0.3)
                continue
            try:
                with urllib.request.urlopen(url, timeout=2):
                    return
            except urllib.error.HTTPError as exc:  # 503: answering, but a part is not up yet
                state = exc.read().decode(errors="replace")[:300]
                if disk_only:  # the studio is up; it says on every page why runs do not start

                    self.stderr.write(self.style.WARNING(disk_state().message()))
                    return
            except OSError:
                pass
            time.sleep(0.3)
        raise CommandError(f"the studio did not become healthy at {url}: {state}")

    def _supervise(self, supervisor: Supervisor) -> None:
        try:
            while True:
                supervisor.check()
                time.sleep(0.5)
        except GaveUp as exc:
            self.stderr.write(f"{exc}; stopping the studio")
        except KeyboardInterrupt:
            self.stdout.write("\nstopping the studio")


def _stop_on_signals() -> None:
    """SIGINT, SIGTERM (and SIGHUP, unless nohup asked to ignore it) stop the studio and all it
    started, like Ctrl-C. SIGINT explicitly: a studio started in the background without a
    terminal inherits SIGINT ignored, and Python then never turns it into KeyboardInterrupt, so
    SIGINT to its group did nothing. Once stopping, further signals do not interrupt the stop."""
    def stop(*_) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    if signal.getsignal(signal.SIGHUP) != signal.SIG_IGN:
        signal.signal(signal.SIGHUP, stop)


def default_web_processes() -> int:
    """One web process per two cores, up to four (Redis, the workers and the database need the
    rest); one on a two-core machine. Each serves any run: a run's messages come from Redis
    once per process and fan out there (webapp/runs/fanout.py)."""
    return max(1, min(4, (os.cpu_count() or 1) // 2))


def web_listener(host: str, port: int) -> socket.socket | None:
    """The listening socket the web processes share (the kernel hands each connection to one).
    None for an IPv6 address, which Daphne cannot take as a descriptor: it then binds itself."""
    if ":" in host:
        return None
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise CommandError(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
    sock.listen(1024)
    sock.set_inheritable(True)
    return sock


def web_servers(env: dict, listener: socket.socket | None, processes: int, log_dir: Path | None = None,
                host: str = "", port: int = 0) -> list[Child]:
    """``processes`` Daphne servers accepting on ``listener`` (passed down as a file descriptor);
    without one, a single server bound to ``host``:``port`` itself."""
    def log(name: str) -> Path | None:
        return log_dir / f"{name}.log" if log_dir else None

    if listener is None:
        return [Child("web", [sys.executable, "-m", "daphne", "-b", host, "-p", str(port), "webapp.asgi:application"],
                      env, settings.BASE_DIR, log("web"))]
    fd = listener.fileno()
    names = ["web"] + [f"web-{i}" for i in range(2, processes + 1)]
    return [Child(name, [sys.executable, "-m", "daphne", "--fd", str(fd), "webapp.asgi:application"],
                  env, settings.BASE_DIR, log(name), pass_fds=(fd,))
            for name in names]


def training_worker(env: dict, processes: int | None = None) -> Child | None:
    """The Celery worker of the ``training`` queue: one process per device (each GPU pinned to one
    process through CUDA_VISIBLE_DEVICES, webapp/celery.py), one on a machine without a GPU.
    None for 0: training jobs then run in the runs' own worker."""
    gpus = visible_gpus()
    processes = (len(gpus) or 1) if processes is None else processes
    if processes <= 0:
        return None
    env = {**env, "TRELLIS_TRAINING_GPUS": ",".join(gpus)} if gpus else dict(env)
    return Child("training", [sys.executable, "-m", "celery", "-A", "webapp", "worker", "-Q", "training",
                              "-c", str(processes), "--loglevel", "WARNING", "-n", "trellis-training@%h"],
                 env, settings.BASE_DIR)


def _well_but_for_disk(health: dict) -> bool:
    return health["database"] == "ok" and health["redis"] == "ok" and health["workers"] > 0


def _unmount_left_sandboxes() -> None:
    for root in (settings.TRELLIS_RUNS_DIR, tempfile.gettempdir()):
        unmount_orphans(Path(root), anywhere_below=True)
