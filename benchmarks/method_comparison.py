"""The SciMARS paper's five methods on each example task, at the same total model allowance:

    base            the starting team, run once (its allowance is the cap; it uses what it needs)
    base+memory     the fixed-memory control: the same team again each iteration, one shared
                    evidence graph, no harness revision (--search memory-fixed)
    mimosa          integrated search (one mutation per iteration, judged)
    scimars         SciMARS rounds (three editors, public checks, reflection)
    scimars+memory  SciMARS with the shared evidence graph (--memory)

Every method's tokens and calls count execution, edits, probes, judging and selection alike
(one budget per method). Printed: the official metric (evaluate.py on held-out data, once after
the final commitment), model calls, tokens and wall time. All offline, real sandboxed execution.

    python benchmarks/method_comparison.py [--tasks wine-cultivar soil-respiration-sites]
                                           [--iterations 2] [--seed 1] [--max-tokens 1500000]
"""
from __future__ import annotations

import argparse
import io
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from engine.budget import Budget  # noqa: E402
from engine.evolve import evolve  # noqa: E402
from engine.run_spec import RunSpec  # noqa: E402
from engine.runner import RunConfig, run_workflow  # noqa: E402
from engine.synthesis import team_workflow  # noqa: E402
from engine.task import load_task  # noqa: E402

METHODS = ("base", "base+memory", "mimosa", "scimars", "scimars+memory")


def _base(task, run_dir: Path, seed: int, max_tokens: int) -> tuple[dict, dict]:
    budget = Budget(max_tokens=max_tokens)
    result = run_workflow(task, team_workflow(task), RunConfig(run_dir=run_dir, seed=seed, budget=budget))
    return result.metric or {}, budget.used.to_dict()


def _search(task, method: str, runs: Path, seed: int, iterations: int, max_tokens: int) -> tuple[dict, dict]:
    search = {"base+memory": "memory-fixed", "scimars+memory": "scimars"}.get(method, method)
    result = evolve(task.folder,
                    RunSpec(search=search, iterations=iterations, seed=seed, max_tokens=max_tokens, single_agent=False,
                            memory=method.endswith("+memory")),
                    runs_dir=runs, out=io.StringIO())
    return result.final.get("official") or {}, result.usage


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max-tokens", type=int, default=1_500_000, help="each method's model allowance")
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--tasks", nargs="+", default=sorted(p.name for p in (ROOT / "examples").iterdir()
                                                            if (p / "Problem.md").exists()))
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    print(f"five methods, {args.iterations} iteration(s) each, {args.max_tokens:,} tokens allowed per method, "
          f"seed {args.seed}")
    header = f"{'task':<24} {'metric':<12} {'method':<15} {'official':>10} {'calls':>6} {'tokens':>9} {'wall s':>7}"
    print(header)
    print("-" * len(header))
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.tasks:
            task = load_task(ROOT / "examples" / name)
            best: tuple[float, str] | None = None
            for method in args.methods:
                started = time.perf_counter()
                try:
                    if method == "base":
                        metric, used = _base(task, Path(tmp) / f"{name}-base", args.seed, args.max_tokens)
                    else:
                        metric, used = _search(task, method, Path(tmp) / "runs", args.seed, args.iterations,
                                               args.max_tokens)
                    value = f"{metric['value']:.4g}" if metric.get("ok") else "fail"
                except Exception as exc:  # one method's failure is a row, not the end of the table
                    metric, used, value = {}, {}, f"error: {type(exc).__name__}"
                if metric.get("ok"):
                    key = metric["value"] if task.metric.higher_is_better else -metric["value"]
                    if best is None or key > best[0]:  # a tie goes to the method listed first (cheaper)
                        best = (key, method)
                print(f"{name:<24} {task.metric.name:<12} {method:<15} {value:>10} {used.get('calls', 0):>6} "
                      f"{used.get('tokens', 0):>9} {time.perf_counter() - started:>7.0f}", flush=True)
            if best:
                print(f"{'':<24} {'':<12} best: {best[1]}", flush=True)


if __name__ == "__main__":
    main()
