"""Evidence-graph retrieval latency (engine/evidence): p50 and p95 of the queries a role makes
before its step, on graphs of 1k, 10k and 100k records (goal: p95 < 20 ms at 100k).

    python benchmarks/evidence_retrieval.py [--sizes 1000 10000 100000] [--queries 200]
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.evidence import RECORD_KINDS, Author, Query, SqliteEvidenceStore  # noqa: E402
from figures import record  # noqa: E402 - benchmarks/figures.py, beside this script

WORDS = ("residual shape mismatch validation fold extrapolation spline polynomial ridge forest boosting "
         "noise variance bias outlier jump discontinuity power law exponent length amplitude period "
         "temperature moisture site group leakage scaling standardise seed accuracy rmse r2 contract schema "
         "column missing target feature importance kernel neighbour baseline constant improvement regression").split()
ROLES = ("analyzer", "planner", "coder", "debugger", "verifier", "finalizer")


def build(store: SqliteEvidenceStore, n: int, rng: random.Random) -> float:
    started = time.perf_counter()
    for i in range(store.count(), n):
        role = rng.choice(ROLES)
        store.add(rng.choice(RECORD_KINDS), " ".join(rng.choices(WORDS, k=rng.randint(6, 30))),
                  Author(agent=role, role=role), tags=rng.sample(("failed", "passed", "score", "shape", "lesson"), 2),
                  iteration=i // 500)
    return time.perf_counter() - started


def queries(rng: random.Random, n_records: int) -> dict[str, callable]:
    last = n_records // 500
    return {
        "text (3 words)": lambda: Query(text=" ".join(rng.sample(WORDS, 3)), limit=20),
        "kind + role": lambda: Query(kinds=(rng.choice(RECORD_KINDS),), role=rng.choice(ROLES), limit=20),
        "kind + tag + text": lambda: Query(kinds=("check_result", "lesson"), tag="failed",
                                           text=" ".join(rng.sample(WORDS, 2)), limit=20),
        "recent iterations": lambda: Query(since_iteration=max(0, last - 2), limit=20),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    rng = random.Random(0)
    print(f"{'records':>8} {'query':<20} {'p50 ms':>8} {'p95 ms':>8} {'hits':>5}   (insert rate)")
    with tempfile.TemporaryDirectory() as tmp:
        store = SqliteEvidenceStore(Path(tmp) / "evidence.sqlite")
        for size in sorted(args.sizes):
            before = store.count()
            seconds = build(store, size, rng)
            rate = (size - before) / seconds if seconds else float("inf")
            for name, make in queries(rng, size).items():
                times, hits = [], 0
                for _ in range(args.queries):
                    q = make()
                    t = time.perf_counter()
                    hits = len(store.search(q))
                    times.append((time.perf_counter() - t) * 1000)
                times.sort()
                p95 = times[int(0.95 * (len(times) - 1))]
                print(f"{size:>8} {name:<20} {statistics.median(times):>8.2f} {p95:>8.2f} {hits:>5}   "
                      f"({rate:,.0f} records/s)", flush=True)
                if size == max(args.sizes) and name in ("text (3 words)", "kind + tag + text"):
                    record(f"evidence query at {size:,} records, {name} (p95)", p95, "ms", 20.0)
        store.close()


if __name__ == "__main__":
    main()
