"""Task x search procedure -> official metric of the initial and final workflow, iterations,
model calls, tokens and wall time. All offline, all real execution.

    python benchmarks/search_comparison.py [--iterations 4] [--seed 1] [--searches mimosa scimars tree]
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
from engine.run_spec import RunSpec  # noqa: E402
from engine.search.registry import SEARCHES  # noqa: E402

TASKS = ("discontinuous-1d", "diabetes-progression")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--searches", nargs="+", default=list(SEARCHES))
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    header = (f"{'task':<22} {'search':<8} {'metric':<12} {'initial':>9} {'final':>9} {'better?':>8} "
              f"{'iters':>5} {'calls':>6} {'tokens':>8} {'wall s':>7}")
    print(header)
    print("-" * len(header))
    with tempfile.TemporaryDirectory() as tmp:
        for task in TASKS:
            for search in args.searches:
                try:
                    r = evolve(ROOT / "examples" / task,
                               RunSpec(search=search, iterations=args.iterations, seed=args.seed, max_tokens=3_000_000),
                               runs_dir=Path(tmp), out=io.StringIO())
                except NotImplementedError as exc:
                    print(f"{task:<22} {search:<8} not available: {exc}")
                    continue
                i, f = r.initial["official"], r.final["official"]
                name = i.get("metric", "?")
                hib = i.get("higher_is_better", True)
                iv, fv = i.get("value"), f.get("value")
                better = "-" if iv is None or fv is None else ("yes" if (fv > iv if hib else fv < iv)
                                                               else "same" if fv == iv else "NO")
                print(f"{task:<22} {search:<8} {name:<12} {_n(iv):>9} {_n(fv):>9} {better:>8} {r.iterations:>5} "
                      f"{r.usage['calls']:>6} {r.usage['tokens']:>8} {r.wall_s:>7.1f}", flush=True)


def _n(x) -> str:
    return "-" if x is None else f"{x:.4g}"


if __name__ == "__main__":
    main()
