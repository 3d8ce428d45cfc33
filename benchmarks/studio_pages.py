"""The studio's pages at lab scale, in a fresh SQLite database: the trace page of a run of 100k
events (first page, later pages, filtered pages; the events are those of a real run of the team,
repeated) and the home page with 1000 runs of a task; p50
and p95 over repeats, beside the goal (< 100 ms). Django's test client, no web server: the view,
its queries and its template are timed.

    python benchmarks/studio_pages.py [--events 100000] [--repeat 10]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["TRELLIS_VAR_DIR"] = tempfile.mkdtemp(prefix="trellis-pages-")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
os.environ.setdefault("TRELLIS_SECRET_KEY", "benchmark-only-not-a-secret")

import django  # noqa: E402

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.test import Client  # noqa: E402
from figures import record  # noqa: E402 - benchmarks/figures.py, beside this script

from webapp import heap  # noqa: E402
from webapp.runs.models import Event, Run, RunStatus
from webapp.tasks.models import Task
from webapp.teams.models import Membership, Project, Role


def real_events() -> list:
    """The events of one real run of the team (the offline scientist, programs in the subprocess
    sandbox): prompts, answers, programs and their output as a run writes them, which is what
    the trace page reads back (typed) for every row it lists."""
    from engine.runner import RunConfig, run_workflow
    from engine.synthesis import team_workflow
    from engine.task import load_task
    from engine.trace import ListSink

    task = load_task(ROOT / "examples" / "discontinuous-1d")
    sink = ListSink()
    run_workflow(task, team_workflow(task), RunConfig(run_dir=Path(tempfile.mkdtemp(prefix="trellis-pages-run-")),
                                                      seed=0), sinks=[sink])
    return sink.events


def fill(n: int) -> Run:
    user = get_user_model().objects.create_user("bench", password="x")
    project = Project.objects.create(name="bench")
    Membership.objects.create(project=project, user=user, role=Role.OWNER)
    task = Task.objects.create(project=project, name="discontinuous-1d",
                               folder=str(ROOT / "examples" / "discontinuous-1d"))
    run = Run.objects.create(task=task, status=RunStatus.COMPLETED, search="mimosa")
    batch = []
    real = real_events()  # one run's events, repeated as a long search's probes would write them
    for seq in range(1, n + 1):
        e = real[seq % len(real)]
        batch.append(Event(run=run, seq=seq, source="bench", source_seq=seq, ts=float(seq),
                           kind=e.kind, agent=e.agent or "", iteration=seq // 2000, payload=e.payload))
        if len(batch) == 5000:
            Event.objects.bulk_create(batch)
            batch = []
    Event.objects.bulk_create(batch)
    Run.objects.filter(pk=run.pk).update(last_seq=n)
    return run


def timed(client: Client, url: str, repeat: int) -> tuple[float, list[float]]:
    times = []
    for _ in range(repeat + 1):
        started = time.perf_counter()
        response = client.get(url)
        times.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, (url, response.status_code)
    return times[0], times[1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--runs", type=int, default=1000, help="runs of the task on the home page")
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    started = time.perf_counter()
    run = fill(args.events)
    filled = time.perf_counter() - started
    heap.settle()  # as a web process does once it has started (webapp/asgi.py)
    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(get_user_model().objects.get(username="bench"))
    print(f"| trace page, {args.events:,} events | first | p50 | p95 | goal |\n|---|---|---|---|---|")
    last = (args.events + 49) // 50
    for label, url in (("first page", f"/runs/{run.pk}/trace"), ("page in the middle", f"/runs/{run.pk}/trace?page={last // 2}"),
                       ("last page", f"/runs/{run.pk}/trace?page={last}"),
                       ("filtered by kind", f"/runs/{run.pk}/trace?kind=check"),
                       ("filtered by agent and iteration", f"/runs/{run.pk}/trace?agent=coder&iteration=2")):
        first, rest = timed(client, url, args.repeat)
        p95 = sorted(rest)[max(0, int(round(0.95 * len(rest))) - 1)]
        print(f"| {label} | {first:.0f} ms | {statistics.median(rest):.0f} ms | {p95:.0f} ms | < 100 ms |")
        record(f"trace page at {args.events:,} events, {label} (p95)", p95, "ms", 100.0)
    task = run.task
    Run.objects.bulk_create([Run(task=task, status=RunStatus.COMPLETED, search="mimosa",
                                 result={"final": {"official": {"ok": True, "value": i / 1000}}},
                                 usage={"tokens": 1000 + i, "cost_usd": 0.0}) for i in range(args.runs - 1)])
    first, rest = timed(client, "/", args.repeat)
    p95 = sorted(rest)[max(0, int(round(0.95 * len(rest))) - 1)]
    size = len(client.get("/").content)
    record(f"home page, {args.runs:,} runs (p95)", p95, "ms", 100.0)
    print(f"| home page, {args.runs:,} runs of one task ({size / 1000:.0f} kB) | {first:.0f} ms | "
          f"{statistics.median(rest):.0f} ms | {p95:.0f} ms | < 100 ms |")
    print(f"\n{args.events:,} events written in {filled:.0f} s to a fresh SQLite database")


if __name__ == "__main__":
    main()
