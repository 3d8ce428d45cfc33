"""Annotation import and export at scale (issue 26 item 15): seconds, SQL queries and peak memory
of importing N annotations from a JSONL file and of exporting them again (JSONL and CSV), through
the studio's own pages (Django's test client: the upload view, the export view, the middleware),
on a temporary SQLite database.

Each measured step runs in a child process of its own (forked after the data is in place), so
that one step's memory is not another's: "peak MB" is how far the process's resident memory rose
above where it stood when the step began (sampled every 5 ms). "queries" counts every SQL
statement the step sent. The export is read as a browser reads it, chunk by chunk, and its rows
are counted. Each step is stopped after --time-limit seconds (the table says so).

The annotations are spread over two runs and each is about a trace event of its own: the case of
an annotator who labelled a whole trace, where every row's item (the event's kind, agent,
iteration, summary) must be looked up.

Imports of more rows than TRELLIS_ANNOTATION_IMPORT_MAX_ROWS are refused by the studio; this
script lifts the caps for its imports (it measures what an import of N rows costs, not the cap).

    .venv/bin/python benchmarks/annotation_export.py                         # 1,000 / 10,000 / 100,000
    .venv/bin/python benchmarks/annotation_export.py --sizes 1000 10000 --time-limit 60
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

RUNS = 2
LABELS = ["wrong data path", "hallucinated value", "good repair"]
CAPS_LIFTED = {"TRELLIS_ANNOTATION_IMPORT_MAX_ROWS": 10**9, "TRELLIS_ANNOTATION_PROJECT_MAX_ROWS": 10**9,
               "TRELLIS_ANNOTATION_IMPORT_MAX_BYTES": 10**12}


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class PeakRss:
    """The highest resident memory seen while the block ran, above where it began."""

    def __init__(self):
        self.start = self.peak = 0
        self._stop = threading.Event()

    def _sample(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, _rss())
            self._stop.wait(0.005)

    def __enter__(self):
        self.start = self.peak = _rss()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss())

    @property
    def mb(self) -> float:
        return (self.peak - self.start) / 2**20


def setup(max_n: int) -> dict:
    """Migrate the temporary database; a reviewer of a project with RUNS runs of max_n/RUNS trace
    events each and a pass/fail label set."""
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    from django.contrib.auth import get_user_model

    from webapp.annotations.models import LabelSet
    from webapp.runs.models import Event, Run, RunStatus
    from webapp.tasks.models import Task
    from webapp.teams.models import Membership, Project, Role

    user = get_user_model().objects.create_user("bench", password="bench")
    project = Project.objects.create(name="Annotation benchmark")
    Membership.objects.create(project=project, user=user, role=Role.REVIEWER)
    task = Task.objects.create(project=project, name="discontinuous-1d", folder=str(ROOT / "examples" / "discontinuous-1d"))
    LabelSet.objects.create(project=project, name="Failure modes", labels=LABELS, score_kind="pass_fail")
    per_run = -(-max_n // RUNS)
    runs = []
    for _ in range(RUNS):
        run = Run.objects.create(task=task, created_by=user, status=RunStatus.COMPLETED)
        runs.append(run.pk)
        Event.objects.bulk_create(
            (Event(run=run, seq=s, source="r", source_seq=s, ts=1000.0 + s, kind="check", agent=("coder", "verifier")[s % 2],
                   iteration=s // 50, payload={"name": f"check {s % 7}", "passed": s % 3 != 0,
                                               "detail": f"column {s % 11} has {s % 5} missing values"})
             for s in range(1, per_run + 1)), batch_size=2000)
    return {"user": user.pk, "project": project.pk, "runs": runs, "per_run": per_run}


def jsonl_file(n: int, ctx: dict) -> bytes:
    """N rows as another labelling tool would write them: one per trace event."""
    lines = []
    for i in range(n):
        run, seq = ctx["runs"][i % RUNS], i // RUNS + 1
        lines.append(json.dumps({"run": run, "target_kind": "event", "target_ref": str(seq), "label_set": "Failure modes",
                                 "labels": [LABELS[i % 3]], "passed": "pass" if i % 2 else "fail",
                                 "comment": f"row {i}: the coder read the raw file", "author": "bench"}))
    return ("\n".join(lines) + "\n").encode()


def _client(ctx: dict):
    from django.contrib.auth import get_user_model
    from django.test import Client

    client = Client(SERVER_NAME="localhost")  # an allowed host (the tests' "testserver" is not)
    client.force_login(get_user_model().objects.get(pk=ctx["user"]))
    return client


def step_import(n: int, ctx: dict) -> dict:
    from django.core.files.uploadedfile import SimpleUploadedFile
    from django.db import connection
    from django.test import override_settings

    from webapp.annotations.models import Annotation

    body = jsonl_file(n, ctx)
    client = _client(ctx)
    count = [0]

    def counter(execute, sql, params, many, context):
        count[0] += 1
        return execute(sql, params, many, context)

    with override_settings(**CAPS_LIFTED), connection.execute_wrapper(counter), PeakRss() as mem:
        t0 = time.perf_counter()
        r = client.post(f"/projects/{ctx['project']}/annotations/import",
                        {"file": SimpleUploadedFile("labels.jsonl", body, "application/x-ndjson")})
        took = time.perf_counter() - t0
    made = Annotation.objects.count()
    ok = r.status_code == 302 and made == n
    return {"seconds": took, "queries": count[0], "mb": mem.mb, "ok": ok,
            "note": "" if ok else f"HTTP {r.status_code}, {made} annotation(s)", "bytes": len(body)}


def step_export(n: int, ctx: dict, fmt: str) -> dict:
    from django.db import connection

    client = _client(ctx)
    count, size, lines = [0], 0, 0

    def counter(execute, sql, params, many, context):
        count[0] += 1
        return execute(sql, params, many, context)

    with connection.execute_wrapper(counter), PeakRss() as mem:
        t0 = time.perf_counter()
        r = client.get(f"/projects/{ctx['project']}/annotations/export?format={fmt}")
        first = None
        for chunk in (r.streaming_content if r.streaming else [r.content]):
            if first is None:
                first = time.perf_counter() - t0
            size += len(chunk)
            lines += chunk.count(b"\n")
        took = time.perf_counter() - t0
    rows = lines - (1 if fmt == "csv" else 0)  # CSV: the header; no comment in the data holds a newline
    ok = r.status_code == 200 and rows == n
    return {"seconds": took, "queries": count[0], "mb": mem.mb, "ok": ok, "first_byte": first or took,
            "streamed": r.streaming, "note": "" if ok else f"HTTP {r.status_code}, {rows} row(s)", "bytes": size}


def _child(conn, fn, args):
    try:
        conn.send(fn(*args))
    except BaseException as exc:  # noqa: BLE001 - reported in the table
        conn.send({"error": f"{type(exc).__name__}: {exc}"})
    finally:
        conn.close()


def measure(fn, args, limit: float) -> dict:
    """fn(*args) in a forked child, stopped after ``limit`` seconds."""
    from django.db import connections

    connections.close_all()
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(child, fn, args))
    t0 = time.perf_counter()
    proc.start()
    child.close()
    result = None
    if parent.poll(limit):
        try:
            result = parent.recv()
        except EOFError:
            result = {"error": "the step died"}
    proc.join(5)
    if proc.is_alive():
        proc.kill()
        proc.join()
    if result is None:
        result = {"error": f"stopped after {limit:.0f} s", "seconds": time.perf_counter() - t0}
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000, 100_000])
    ap.add_argument("--time-limit", type=float, default=300, help="seconds each step may take (default 300)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder (its database)")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="trellis-annotation-bench-"))
    os.environ["TRELLIS_VAR_DIR"] = str(tmp)
    os.environ["TRELLIS_DB_PATH"] = str(tmp / "bench.sqlite3")
    t0 = time.perf_counter()
    ctx = setup(max(args.sizes))
    print(f"# {RUNS} runs, {ctx['per_run'] * RUNS:,} trace events, set up in {time.perf_counter() - t0:.1f} s; "
          f"database {tmp / 'bench.sqlite3'}", flush=True)

    from webapp.annotations.models import Annotation

    header = f"{'step':<14} {'rows':>8} {'MB file':>8} {'seconds':>9} {'1st byte s':>10} {'queries':>9} {'peak MB':>8}  note"
    print(header)
    print("-" * len(header), flush=True)
    for n in args.sizes:
        Annotation.objects.all().delete()
        steps = [("import jsonl", step_import, (n, ctx))]
        steps += [(f"export {fmt}", step_export, (n, ctx, fmt)) for fmt in ("jsonl", "csv")]
        for name, fn, fn_args in steps:
            r = measure(fn, fn_args, args.time_limit)
            if "error" in r:
                secs = f"> {r['seconds']:.0f}" if r.get("seconds") else "-"
                print(f"{name:<14} {n:>8,} {'':>8} {secs:>9} {'':>10} {'':>9} {'':>8}  {r['error']}", flush=True)
                if name.startswith("import"):
                    break  # nothing to export
                continue
            first = f"{r['first_byte']:.2f}" if "first_byte" in r else ""
            note = r["note"] or ("streamed" if r.get("streamed") else ("one response" if "streamed" in r else ""))
            print(f"{name:<14} {n:>8,} {r['bytes'] / 2**20:>8.1f} {r['seconds']:>9.2f} {first:>10} {r['queries']:>9,} "
                  f"{r['mb']:>8.1f}  {note}", flush=True)
    if args.keep:
        print(f"# kept {tmp}")
    else:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
