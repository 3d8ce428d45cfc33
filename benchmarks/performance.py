"""Issue 29's table: every orchestration figure beside its goal, measured now, on this machine.

Runs each benchmark that measures one of them, in a process of its own and one after the other
(never two at once: they would time each other), and prints one table from the figures they
record (benchmarks/figures.py); each benchmark's own, fuller table is printed above it.

    python benchmarks/performance.py [--quick] [--suite] [--only NAME ...]

--quick: smaller sizes (10k archive, 10k evidence records, 10k trace events, 100 viewers), for a
smoke run; the goals are stated at the full sizes. --suite: also time the whole test suite
(`./trellis test`, about 12 minutes). Measure on a quiet machine: the ratios hold under load
better than the times.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent


def plan(quick: bool) -> dict[str, list[str]]:
    """Each benchmark and its arguments, full or quick."""
    return {
        "lab_scale": ["--archive-sizes", "10000"] + ([] if quick else ["100000"]),
        "compare_langgraph": [],
        "evidence_retrieval": ["--sizes", "10000" if quick else "100000"],
        "studio_pages": ["--events", "10000" if quick else "100000"],
        "live_updates": ["--clients", "100"] + ([] if quick else ["300"]) + ["--viewers", "0"],
        "sandbox_overhead": ["--trivial-runs", "10", "--train-seconds", "2"],
        "first_search": ["--repeat", "2" if quick else "3"],
    }


def run(name: str, args: list[str], figures: Path) -> tuple[int, float]:
    print(f"\n## {name} {' '.join(args)}\n", flush=True)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, str(HERE / f"{name}.py"), *args], cwd=ROOT,
                          env={**os.environ, "TRELLIS_BENCH_FIGURES": str(figures)})
    return done.returncode, time.perf_counter() - started


def suite(figures: Path) -> int:
    print("\n## the test suite (./trellis test)\n", flush=True)
    started = time.perf_counter()
    done = subprocess.run([str(ROOT / "trellis"), "test"], cwd=ROOT)
    minutes = (time.perf_counter() - started) / 60
    with figures.open("a") as fh:
        fh.write(json.dumps({"figure": f"test suite, {os.cpu_count()} cores", "value": minutes, "unit": "min",
                             "goal": 15.0, "met": minutes < 15.0 and done.returncode == 0, "lower": True, "peer": "",
                             "note": "passed" if done.returncode == 0 else f"FAILED (exit {done.returncode})"}) + "\n")
    return done.returncode


def table(rows: list[dict]) -> str:
    lines = ["| figure | Trellis | goal | met | note |", "|---|---|---|---|---|"]
    for r in rows:
        unit = r["unit"]
        value = f"{r['value']:.2f} {unit}" if r["value"] < 10 else f"{r['value']:.0f} {unit}"
        if r["goal"] is None:
            goal = "-"
        else:
            goal = f"{'<' if r['lower'] else '>'} {r['goal']:.2f} {unit}" + (f" ({r['peer']}, same run)" if r["peer"] else "")
        met = "-" if r["met"] is None else ("yes" if r["met"] else "**no**")
        lines.append(f"| {r['figure']} | {value} | {goal} | {met} | {r['note']} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--suite", action="store_true", help="also time ./trellis test")
    parser.add_argument("--only", nargs="*", help="benchmarks to run (default: all)")
    args = parser.parse_args()
    failed = []
    with tempfile.TemporaryDirectory(prefix="trellis-performance-") as tmp:
        figures = Path(tmp) / "figures.jsonl"
        figures.touch()
        for name, extra in plan(args.quick).items():
            if args.only and name not in args.only:
                continue
            code, seconds = run(name, extra, figures)
            print(f"\n({name}: {seconds:.0f} s{'' if code == 0 else f', FAILED with exit {code}'})", flush=True)
            if code:
                failed.append(name)
        if args.suite and suite(figures):
            failed.append("test suite")
        rows = [json.loads(line) for line in figures.read_text().splitlines() if line.strip()]
    load = os.getloadavg()[0]
    print(f"\n# Issue 29: orchestration figures beside their goals ({os.cpu_count()} cores, load average now "
          f"{load:.1f}{', quick sizes' if args.quick else ''})\n")
    print(table(rows))
    if failed:
        print(f"\nbenchmarks that failed: {', '.join(failed)}")
    missed = [r["figure"] for r in rows if r["met"] is False]
    print(f"\n{len(rows) - len(missed)} of {len(rows)} figures meet their goal"
          + (f"; not met: {'; '.join(missed)}" if missed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
