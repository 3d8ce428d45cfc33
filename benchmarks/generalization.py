"""Does the science hold on every example task? For each task folder in examples/: the trivial
baselines (constant, nearest neighbour), the single-agent workflow, and the team's initial and
final workflow for each search, all scored officially by the task's evaluate.py, with whether
each run's plausibility checks passed and the hindsight's rank correlations (validation and J
against the official metric over every probed candidate). All offline, all real execution.

    python benchmarks/generalization.py [--iterations 2] [--seed 1] [--searches mimosa scimars tree]
                                        [--tasks pendulum-extrapolation wine-cultivar]
"""
from __future__ import annotations

import argparse
import io
import logging
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from engine.evolve import evolve  # noqa: E402
from engine.search.registry import SEARCHES  # noqa: E402
from engine.task import load_task  # noqa: E402
from engine.trace import read_events  # noqa: E402

PLAUSIBILITY = ("finite", "within_range", "beats_trivial", "claims_match")


def _fmt(metric: dict | None) -> str:
    return f"{metric['value']:.4g}" if metric and metric.get("ok") else "fail"


def _plausible(events) -> str:
    """'ok' when every plausibility check that ran passed, else the failed names."""
    latest = {e.payload["name"]: e.payload["passed"] for e in events
              if e.kind == "check" and e.payload.get("name") in PLAUSIBILITY}
    failed = [n for n, ok in latest.items() if not ok]
    return "ok" if latest and not failed else ("-" if not latest else "FAIL " + ",".join(failed))


def _rho(result, a: str, b: str) -> str:
    c = next((c for c in (result.hindsight or {}).get("correlations", []) if (c["a"], c["b"]) == (a, b)), None)
    return "n/a" if not c or c.get("rho") is None else f"{c['rho']:+.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--searches", nargs="+", default=list(SEARCHES))
    parser.add_argument("--tasks", nargs="+", default=sorted(p.name for p in (ROOT / "examples").iterdir()
                                                            if (p / "Problem.md").exists()))
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    header = (f"{'task':<24} {'metric':<13} {'constant':>9} {'nearest':>9} {'single':>9} {'search':<8} "
              f"{'initial':>9} {'final':>9} {'plaus.':>7} {'beats all?':>10} {'ρ val~off':>9} {'ρ J~off':>8}")
    print(header)
    print("-" * len(header))
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.tasks:
            task = load_task(ROOT / "examples" / name)
            single = None  # the single-agent baseline runs once per task, with the first search
            for search in args.searches:
                result = evolve(task.folder, search, iterations=args.iterations, seed=args.seed,
                                runs_dir=Path(tmp) / "runs", out=io.StringIO(), single_agent=single is None)
                single = single or result.baselines.get("single_agent")
                base = {**result.baselines, "single_agent": single}
                final = result.final.get("official") or {}
                # the workflow probes' checks, and the tree's (its nodes' checks are in the search's trace)
                probes = [e for p in (Path(result.run_dir) / "probes").glob("*/trace*.jsonl") for e in read_events(p)]
                probes += list(read_events(Path(result.trace)))
                hib = task.metric.higher_is_better
                refs = [m["value"] for m in base.values() if m and m.get("ok")]
                beats = final.get("ok") and all((final["value"] > r) if hib else (final["value"] < r) for r in refs)
                print(f"{name:<24} {task.metric.name:<13} {_fmt(base.get('constant')):>9} "
                      f"{_fmt(base.get('nearest_neighbour')):>9} {_fmt(single):>9} {search:<8} "
                      f"{_fmt(result.initial.get('official')):>9} {_fmt(final):>9} {_plausible(probes):>7} "
                      f"{'yes' if beats else 'NO':>10} {_rho(result, 'validation', 'official'):>9} "
                      f"{_rho(result, 'J', 'official'):>8}", flush=True)


if __name__ == "__main__":
    main()
