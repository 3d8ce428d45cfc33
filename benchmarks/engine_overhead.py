"""Engine overhead per DAG node, with model and code time excluded.

Builds valid workflows of 10, 100 and 1000 agents on the discontinuous-1d example (the
usual analyzer -> planner -> coder -> debugger -> verifier chain, then layers of routers
that pass the execution evidence on, fanning out and back in, then the finalizer), runs
each with the offline provider, and subtracts the time spent in model calls, sandboxed
code and evaluate.py from the wall time. What is left is the engine's own work: scheduling,
handoff contract checks, prompt building, tracing to disk.

    python benchmarks/engine_overhead.py [--sizes 10 100 1000]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from engine.budget import Budget  # noqa: E402
from engine.runner import RunConfig, run_workflow  # noqa: E402
from engine.synthesis import EVIDENCE, team_workflow  # noqa: E402
from engine.task import load_task  # noqa: E402
from engine.workflow import Agent, Edge, Workflow  # noqa: E402

WIDTH = 4


def wide_workflow(task, n_agents: int) -> Workflow:
    base = team_workflow(task)
    head = [a for a in base.agents if a.id != "finalizer"]
    finalizer = base.agent("finalizer")
    n_routers = max(0, n_agents - len(head) - 1)
    routers = [Agent(f"router{i:04d}", ("router",), inputs={"execution_evidence": EVIDENCE},
                     outputs={"execution_evidence": EVIDENCE}) for i in range(n_routers)]
    edges = [e for e in base.edges if e.target != "finalizer" or e.artifact != "execution_evidence"]
    previous = ["verifier"]
    for start in range(0, n_routers, WIDTH):
        layer = [r.id for r in routers[start:start + WIDTH]]
        for j, rid in enumerate(layer):
            sources = {previous[j % len(previous)], previous[(j + 1) % len(previous)]}
            edges += [Edge(s, rid, "execution_evidence", EVIDENCE) for s in sorted(sources)]
        previous = layer
    edges += [Edge(s, "finalizer", "execution_evidence", EVIDENCE) for s in previous]
    return Workflow(f"wide-{n_agents}", tuple(head + routers + [finalizer]), tuple(edges), base.routes,
                    base.harness).validate()


def measure(task, n: int) -> dict:
    wf = wide_workflow(task, n)
    t0 = time.perf_counter()
    wf.validate()
    validate_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        result = run_workflow(task, wf, RunConfig(run_dir=Path(tmp) / "run", seed=0,
                                                  budget=Budget(max_tokens=None)))
    assert result.status == "completed", result.reason
    return {"agents": len(wf.agents), "edges": len(wf.edges), "validate_s": validate_s,
            "wall_s": result.duration_s, "model_s": result.model_seconds, "code_s": result.execution_seconds,
            "eval_s": result.evaluation_seconds, "overhead_s": result.overhead_seconds,
            "per_node_ms": 1000 * result.overhead_seconds / len(wf.agents), "calls": result.usage["calls"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 1000])
    args = parser.parse_args()
    task = load_task(ROOT / "examples" / "discontinuous-1d")
    header = f"{'agents':>7} {'edges':>6} {'calls':>6} {'wall s':>8} {'model s':>8} {'code s':>7} " \
             f"{'eval s':>7} {'engine s':>9} {'engine ms/node':>15} {'validate ms':>12}"
    print(header)
    print("-" * len(header))
    for n in args.sizes:
        r = measure(task, n)
        print(f"{r['agents']:>7} {r['edges']:>6} {r['calls']:>6} {r['wall_s']:>8.2f} {r['model_s']:>8.2f} "
              f"{r['code_s']:>7.2f} {r['eval_s']:>7.2f} {r['overhead_s']:>9.3f} {r['per_node_ms']:>15.2f} "
              f"{1000 * r['validate_s']:>12.1f}", flush=True)


if __name__ == "__main__":
    main()
