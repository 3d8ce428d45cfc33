"""Orchestration at lab scale, each figure beside its goal (issue 29):

- the archive's warm-start lookup among N archived workflows (10k by default; --archive-sizes):
  the first lookup of a process (it builds or catches up the vector index from the entry files),
  then lookups p50/p95; beside it the old way, every entry file read and compared in pure Python
  (timed on a smaller archive and scaled: it is linear);
- ``Workflow.validate()`` of a 1000-agent workflow.

The query's embedding is not timed (it is one model call, cached for a repeated text): the
lookup is what grows with the archive. Vectors are random 384-dimensional ones, as the sentence
model's; the entries are real archive entries (a workflow, a metric) written as ``add`` writes them.

    python benchmarks/lab_scale.py [--archive-sizes 10000 100000] [--repeat 30]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from engine.archive import ENTRY_FORMAT, WorkflowArchive  # noqa: E402
from figures import record  # noqa: E402 - benchmarks/figures.py, beside this script
from engine.embedding import task_text  # noqa: E402
from engine.synthesis import team_workflow  # noqa: E402
from engine.task import load_task  # noqa: E402

DIM = 384


class VectorEmbedder:
    """Random unit vectors, one per text, fixed by the text: the archive's entries and queries."""

    name = "benchmark-vectors"

    def embed(self, text: str) -> list[float]:
        rng = random.Random(text)
        return [rng.gauss(0, 1) for _ in range(DIM)]


def fill(root: Path, n: int, task) -> None:
    """N entries written as WorkflowArchive.add writes them (without embedding N texts)."""
    entries = root / "entries"
    entries.mkdir(parents=True, exist_ok=True)
    workflow = team_workflow(task).to_dict()
    rng = random.Random(n)
    for i in range(n):
        entry_id = f"20260101T000000-bench-{i:07d}"
        data = {"format": ENTRY_FORMAT, "id": entry_id, "task_name": f"bench-{i}", "task_fingerprint": "x",
                "task_text": f"benchmark task {i}", "embedder": VectorEmbedder.name,
                "embedding": [round(rng.gauss(0, 1), 6) for _ in range(DIM)], "workflow": workflow,
                "workflow_hash": workflow["hash"], "metric": {"ok": True, "value": rng.random(), "higher_is_better": True},
                "search": "mimosa", "note": "", "created": f"2026-01-01T00:00:00.{i:06d}+00:00"}
        (entries / f"{entry_id}.json").write_text(json.dumps(data))


def timed(fn, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        out.append((time.perf_counter() - started) * 1000)
    return out


def p95(xs: list[float]) -> float:
    return sorted(xs)[max(0, int(round(0.95 * len(xs))) - 1)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--archive-sizes", type=int, nargs="*", default=[10_000])
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--scan-size", type=int, default=1000, help="archive size the old scan is timed on")
    args = parser.parse_args()
    task = load_task(ROOT / "examples" / "discontinuous-1d")
    rows = []
    work = Path(tempfile.mkdtemp(prefix="trellis-lab-scale-"))
    scan_root = work / f"scan-{args.scan_size}"
    fill(scan_root, args.scan_size, task)
    scan_archive = WorkflowArchive(scan_root, VectorEmbedder())
    scan_ms = statistics.median(timed(lambda: scan_archive._nearest_by_scan(task), 3))
    for n in args.archive_sizes:
        root = work / f"archive-{n}"
        started = time.perf_counter()
        fill(root, n, task)
        filled = time.perf_counter() - started
        archive = WorkflowArchive(root, VectorEmbedder())
        query = VectorEmbedder().embed(task_text(task))
        archive.embedder = type("Cached", (), {"name": VectorEmbedder.name, "embed": staticmethod(
            lambda text, q=query: q)})()
        first = timed(lambda: archive.nearest(task), 1)[0]
        again = timed(lambda: archive.nearest(task), args.repeat)
        fresh = WorkflowArchive(root, archive.embedder)  # a new process: the index on disk, no matrix in memory
        cold = timed(lambda: fresh.nearest(task), 1)[0]
        record(f"archive warm start, nearest of {n:,} workflows (p95)", p95(again), "ms", 10.0)
        rows.append((f"archive lookup, {n:,} workflows", f"p50 {statistics.median(again):.1f} ms, p95 {p95(again):.1f} ms",
                     "< 10 ms", f"first lookup ever (index built) {first / 1000:.1f} s; first in a new process "
                                f"{cold:.0f} ms; old scan ~{scan_ms * n / args.scan_size / 1000:.1f} s "
                                f"({scan_ms:.0f} ms at {args.scan_size:,}); {n:,} entries written in {filled:.0f} s"))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from engine_overhead import wide_workflow

    wf = wide_workflow(task, 1000)
    wf.validate()
    v = timed(wf.validate, 10)
    record("Workflow.validate(), 1000 agents (p50)", statistics.median(v), "ms", 20.0)
    rows.append(("Workflow.validate(), 1000 agents", f"p50 {statistics.median(v):.1f} ms", "< 20 ms",
                 "agents indexed by id, contract types parsed once per text"))
    print("| figure | Trellis | goal | notes |\n|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
