"""Fault injection against a real studio (embedded Redis, a Celery worker, Daphne, supervised as
``manage.py studio`` supervises them): each fault or attack below, then how the studio came out
of it. Prints one table:

    fault or attack | runs affected | events lost | recovered automatically | time to recover

"events lost" counts events recorded before the fault that were gone afterwards plus gaps in
the run's event numbers (it must be 0). "time to recover" runs from the fault until the studio
is whole again: /healthz ok and the run executing again (or, for a stale decision, closed).

    .venv/bin/python benchmarks/fault_injection.py              # about 10 minutes on 2 cores
    .venv/bin/python benchmarks/fault_injection.py --only redis celery
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.studio_harness import use_studio_environment, wait_for  # noqa: E402

EXAMPLE = ROOT / "examples" / "diabetes-progression"
NOBODY = 65534


@dataclass
class Row:
    fault: str
    runs: int
    lost: int | str
    recovered: str
    seconds: float | None

    def cells(self) -> list[str]:
        return [self.fault, str(self.runs), str(self.lost), self.recovered,
                "–" if self.seconds is None else f"{self.seconds:.1f} s"]


class Bench:
    def __init__(self, studio, iterations: int):
        from django.contrib.auth import get_user_model
        from django.test import Client

        from webapp.teams.models import Membership, Project, Role

        self.studio = studio
        self.iterations = iterations
        self.user = get_user_model().objects.create_user("bench", password="bench-faults")
        self.project = Project.objects.create(name="Fault injection")
        Membership.objects.create(project=self.project, user=self.user, role=Role.REVIEWER)
        self.client = Client(HTTP_HOST="127.0.0.1")
        self.client.force_login(self.user)

    # --- helpers ------------------------------------------------------------------------------
    def start(self, gate: str = "automatic", iterations: int | None = None):
        from webapp.runs import controls
        from webapp.tasks import registration

        task = registration.task_for_folder(self.project, EXAMPLE)
        return controls.start_run(task, self.user, search="mimosa", iterations=iterations or self.iterations,
                                  gate_policy=gate)

    @staticmethod
    def run(pk: int):
        from webapp.runs.models import Run

        return Run.objects.get(pk=pk)

    @staticmethod
    def events(run) -> list[tuple]:
        return list(run.events.order_by("seq").values_list("seq", "kind", "agent", "source_seq"))

    def lost(self, run, before: list[tuple]) -> int:
        after = self.events(run)
        seqs = [e[0] for e in after]
        gaps = (seqs[-1] - len(seqs)) if seqs else 0
        return len(set(before) - set(after)) + gaps

    def finish(self, pk: int, timeout: float = 900):
        return wait_for(lambda: (r := self.run(pk)).status in {"completed", "failed", "cancelled"} and r,
                        timeout, what=f"run {pk} to finish")

    def healthy(self) -> bool:
        return self.studio.health()[0] == 200

    def executing(self, pk: int, attempts: int, after_seq: int) -> bool:
        r = self.run(pk)
        return r.status in {"running", "awaiting_decision"} and r.attempts >= attempts and r.last_seq > after_seq

    # --- attacks on the embedded Redis -----------------------------------------------------------
    def attack_other_uid(self) -> Row:
        from webapp import embedded_redis

        sock = embedded_redis.socket_path(self.studio.var_dir)
        python = shutil.which("python3", path="/usr/bin:/bin")
        if os.geteuid() != 0 or not python:
            return Row("connect to Redis's socket as another uid", 0, 0, "not measured (needs root)", None)
        probe = ("import socket, sys\ns = socket.socket(socket.AF_UNIX)\n"
                 "try:\n    s.connect(sys.argv[1])\nexcept OSError:\n    sys.exit(3)\n")
        code = subprocess.run([python, "-c", probe, str(sock)], user=NOBODY, group=NOBODY, cwd="/",
                              capture_output=True, timeout=30).returncode
        return Row("connect to Redis's socket as another uid", 0, 0,
                   "refused (no access)" if code == 3 else "NOT REFUSED", None)

    def attack_config_save(self) -> Row:
        import redis

        from webapp import embedded_redis

        var = self.studio.var_dir
        results = []
        for password in (None, embedded_redis.password(var)):
            r = redis.Redis(unix_socket_path=str(embedded_redis.socket_path(var)), password=password, socket_timeout=2)
            try:
                r.execute_command("CONFIG", "SET", "dir", "/tmp")
                r.execute_command("SAVE")
                results.append("NOT REFUSED")
            except redis.exceptions.RedisError as exc:
                results.append("unknown command" if "unknown command" in str(exc) else "refused (no password)")
        return Row("CONFIG SET dir + SAVE (without / with the password)", 0, 0, " / ".join(results), None)

    # --- faults ----------------------------------------------------------------------------------
    def kill_redis(self) -> Row:
        run = self.start()
        wait_for(lambda: self.run(run.pk).status == "running" and run.events.count() > 3, 300, what="the run to execute")
        before = self.events(run)
        t0 = time.monotonic()
        os.kill(self.studio.redis.pid, signal.SIGKILL)
        wait_for(lambda: self.studio.redis.restarts >= 1 and self.healthy(), 120, what="the studio to be healthy again")
        # Recovered: healthy, and the run that was executing has recorded events since the kill.
        wait_for(lambda: self.run(run.pk).last_seq > before[-1][0], 300, what="the run to go on")
        seconds = time.monotonic() - t0
        done = self.finish(run.pk)
        ok = done.status == "completed" and done.attempts == 1
        return Row("kill -9 redis-server (a run executing)", 1, self.lost(done, before),
                   "yes (run went on, same attempt)" if ok else f"no ({done.status}, attempts {done.attempts})",
                   seconds)

    def kill_celery_main(self) -> Row:
        run = self.start(iterations=max(2, self.iterations))
        wait_for(lambda: (self.run(run.pk).checkpoint or {}).get("n", -1) >= 1, 600, what="iteration 1 to be persisted")
        wait_for(lambda: run.events.filter(kind="agent_started", iteration=2).exists(), 300, what="iteration 2")
        before = self.events(run)
        old = self.studio.worker.pid
        t0 = time.monotonic()
        os.kill(old, signal.SIGKILL)
        wait_for(lambda: self.studio.worker.pid != old and self.healthy(), 180, what="a new worker")
        wait_for(lambda: self.executing(run.pk, 2, before[-1][0]), 300, what="the run to resume")
        seconds = time.monotonic() - t0
        done = self.finish(run.pk)
        ok = done.status == "completed" and done.attempts == 2
        return Row("kill -9 Celery main process (a run executing)", 1, self.lost(done, before),
                   "yes (worker restarted, run resumed from its checkpoint)" if ok else f"no ({done.status})", seconds)

    def kill_pool_child(self) -> Row:
        from webapp.runs import controls

        run = self.start()
        wait_for(lambda: run.events.filter(kind="agent_started", iteration=1).exists(), 600, what="iteration 1")
        before = self.events(run)
        children = subprocess.run(["pgrep", "-P", str(self.studio.worker.pid)], capture_output=True,
                                  text=True).stdout.split()
        t0 = time.monotonic()
        for pid in children:  # the pool processes (one of them runs the engine)
            os.kill(int(pid), signal.SIGKILL)
        wait_for(lambda: self.run(run.pk).status == "interrupted", 120, what="the run to be marked resumable")
        marked = time.monotonic() - t0
        controls.resume_run(self.run(run.pk))  # what a person does with the Resume button
        wait_for(lambda: self.executing(run.pk, 2, before[-1][0]), 300, what="the run to resume")
        seconds = time.monotonic() - t0
        done = self.finish(run.pk)
        return Row("kill -9 worker pool process (a run executing)", 1, self.lost(done, before),
                   f"no: marked resumable in {marked:.1f} s; Resume (a person) continues it"
                   + ("" if done.status == "completed" else f" ({done.status})"), seconds)

    def stale_decision(self) -> Row:
        from webapp.runs import controls
        from webapp.runs.editing import apply_edit
        from webapp.runs.models import MutationStatus

        run = self.start(gate="manual", iterations=3)
        stale = wait_for(lambda: run.mutations.filter(status=MutationStatus.PROPOSED).first(), 900, what="a proposal")
        before = self.events(run)
        controls.pause_run(self.run(run.pk))
        wait_for(lambda: self.run(run.pk).status == "paused", 120, what="the pause")
        agent = run.current_version.data["agents"][0]["id"]
        apply_edit(self.run(run.pk), "prompt", {"agent": agent, "prompt": "State every assumption."}, "bench")
        t0 = time.monotonic()
        controls.resume_run(self.run(run.pk))

        def closed():
            stale.refresh_from_db()
            return stale.status != MutationStatus.PROPOSED

        wait_for(closed, 600, what="the stale proposal to be closed")
        seconds = time.monotonic() - t0
        versions = run.versions.count()
        self.client.post(f"/mutations/{stale.pk}/approve", {"reason": "late"})
        stale.refresh_from_db()
        unchanged = stale.status == MutationStatus.CLOSED and run.versions.count() == versions
        controls.cancel_run(self.run(run.pk))
        done = self.finish(run.pk)
        return Row("stale pending decision after pause + edit + resume", 1, self.lost(done, before),
                   ("yes (closed with its reason; a late approve changes nothing)" if unchanged
                    else f"no ({stale.status})"), seconds)


def table(rows: list[Row]) -> str:
    header = ["fault or attack", "runs affected", "events lost", "recovered automatically", "time to recover"]
    cells = [header] + [r.cells() for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(header))]
    line = lambda c: "| " + " | ".join(x.ljust(w) for x, w in zip(c, widths)) + " |"  # noqa: E731
    return "\n".join([line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
                     + [line(c) for c in cells[1:]])


SCENARIOS = {"uid": "attack_other_uid", "config": "attack_config_save", "redis": "kill_redis",
             "celery": "kill_celery_main", "pool": "kill_pool_child", "stale": "stale_decision"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=1, help="Mimosa iterations of each run (automatic gate)")
    parser.add_argument("--only", nargs="*", choices=sorted(SCENARIOS), help="run only these scenarios")
    parser.add_argument("--var-dir", type=Path, help="default: a new temporary folder, removed afterwards")
    args = parser.parse_args()
    var_dir = args.var_dir or Path(tempfile.mkdtemp(prefix="trellis-faults-"))
    var_dir.mkdir(parents=True, exist_ok=True)
    use_studio_environment(var_dir, var_dir / "faults.sqlite3")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from tests.studio_harness import Studio

    studio = Studio(var_dir, var_dir / "faults.sqlite3")

    def terminate(signum, frame):  # a kill still runs the cleanup below
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, terminate)
    rows: list[Row] = []
    started = time.monotonic()
    try:
        studio.start()
        studio.supervise()
        bench = Bench(studio, args.iterations)
        print(f"studio on {studio.url}, var {var_dir}; load average {os.getloadavg()[0]:.1f} on "
              f"{os.cpu_count()} cores", flush=True)
        for name in args.only or list(SCENARIOS):
            t = time.monotonic()
            try:
                row = getattr(bench, SCENARIOS[name])()
            except AssertionError as exc:  # a wait_for that timed out
                row = Row(SCENARIOS[name], 1, "?", f"no: {exc}", None)
            rows.append(row)
            print(f"  {row.fault}: done in {time.monotonic() - t:.0f} s", flush=True)
            studio.wait_healthy(180)
    finally:
        studio.stop()
        if not args.var_dir:
            shutil.rmtree(var_dir, ignore_errors=True)
    print()
    print(table(rows))
    print(f"\n{len(rows)} scenarios in {time.monotonic() - started:.0f} s; supervisor: "
          + ("; ".join(studio.supervisor_log) or "nothing to do"))


if __name__ == "__main__":
    main()
