"""AgentCo-op's claim, on Trellis's examples: are retrieval-based synthesis and search
complementary? At the same token budget and the same number of steps, on every example task:

- team: the fixed team, run as it is (``--search fixed``: each step a fresh run, the best kept);
- synthesis: a workflow synthesized from the library, then reviewed and repaired locally
  (``--start synthesized --search repair``);
- search: Mimosa from the fixed team (``--start team --search mimosa``);
- synthesis + search: Mimosa from the synthesized workflow (``--start synthesized --search mimosa``).

Each cell is the final workflow's official score (evaluate.py on the held-out data, once, after
the final commitment) and the tokens the method spent; a last column says whether synthesis
helped (synthesis + search against search, beyond the test set's noise is not computed here:
the official values are compared as they are, so read a small difference as a tie). All offline
(the offline scientist), all real execution; the library is the shipped one, ranked by the real
sentence-embedding model.

    python benchmarks/synthesis.py [--steps 2] [--max-tokens 400000] [--tasks river-flow-forecast ...]
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
os.environ.setdefault("TRELLIS_EXECUTOR", "subprocess")
os.environ.setdefault("TRELLIS_MCP_CONFIG", "none")

from engine.evolve import evolve  # noqa: E402
from engine.run_spec import RunSpec  # noqa: E402
from engine.task import load_task  # noqa: E402

METHODS = (("team", "team", "fixed"), ("synthesis", "synthesized", "repair"),
           ("search", "team", "mimosa"), ("synthesis + search", "synthesized", "mimosa"))


def _value(result) -> float | None:
    official = (result.final or {}).get("official") or {}
    return official.get("value") if official.get("ok") else None


def _cell(value: float | None, tokens: int) -> str:
    return f"{value:.4g} ({tokens / 1000:.0f}k tok)" if value is not None else f"fail ({tokens / 1000:.0f}k tok)"


def _helped(values: dict[str, float | None], hib: bool) -> str:
    """Did synthesis help? Synthesis against the team, and synthesis + search against search."""
    def cmp(a: float | None, b: float | None) -> str:
        if a is None or b is None:
            return "n/a"
        if abs(a - b) <= 1e-9 * max(1.0, abs(b)):
            return "same"
        return "better" if (a > b) == hib else "worse"
    return f"alone {cmp(values['synthesis'], values['team'])}; before search " \
           f"{cmp(values['synthesis + search'], values['search'])}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2, help="iterations (rounds, runs) each method may take")
    parser.add_argument("--max-tokens", type=int, default=400_000, help="the token budget of each method")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tasks", nargs="*", default=None)
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    tasks = args.tasks or sorted(p.name for p in (ROOT / "examples").iterdir()
                                 if (p / "Problem.md").is_file())
    from engine.embedding import TaskEmbedder

    embedder = TaskEmbedder()
    rows = []
    work = Path(tempfile.mkdtemp(prefix="trellis-synthesis-bench-"))
    for name in tasks:
        task = load_task(ROOT / "examples" / name)
        values, cells, seconds = {}, {}, {}
        for label, start, search in METHODS:
            started = time.perf_counter()
            try:
                result = evolve(ROOT / "examples" / name,
                                RunSpec(search=search, iterations=args.steps, seed=args.seed,
                                        max_tokens=args.max_tokens, single_agent=False, start=start),
                                runs_dir=work, out=io.StringIO(), embedder=embedder)
                values[label] = _value(result)
                cells[label] = _cell(values[label], int((result.usage or {}).get("tokens", 0)))
            except Exception as exc:  # a method that breaks is a finding, not the end of the table
                values[label], cells[label] = None, f"error: {str(exc)[:60]}"
            seconds[label] = time.perf_counter() - started
            print(f"{name:24} {label:18} {cells[label]}  ({seconds[label]:.0f} s)", file=sys.stderr, flush=True)
        metric = f"{task.metric.name} {'↑' if task.metric.higher_is_better else '↓'}"
        rows.append((name, metric, *(cells[m[0]] for m in METHODS), _helped(values, task.metric.higher_is_better)))
    header = ("task", "metric", *(m[0] for m in METHODS), "synthesis helped?")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print(f"\n{args.steps} step(s) and {args.max_tokens:,} tokens per method, seed {args.seed}; "
          f"official = evaluate.py on held-out data; runs under {work}")


if __name__ == "__main__":
    main()
