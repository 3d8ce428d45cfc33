"""The first search in a fresh process: how long before real work starts?

``manage.py evolve`` (Mimosa, one iteration, the offline model, the subprocess sandbox) in a fresh
Python process, on a var dir whose archive already holds one workflow, so the warm start looks the
task up, in two cases:

- the same task again (a lab's usual second search): the archived vector of the same task text is
  reused, so no embedding model is loaded;
- a task new to the archive (--other): its text is embedded, so the model is loaded first.

From the process's launch, taken here just before it starts:

- ready: the search's first event (``search_started``: Django set up, the task read and
  preflighted, the archive consulted, the starting workflow chosen);
- first answer: the first model call's answer is traced (litellm and everything the first call
  needs loaded);
- done: the process exits (the search's one iteration, the official scoring, archiving).

Goal (issue 29): the first answer in under 5 s. Each figure is the median of --repeat fresh
processes; the archive's one entry is made once, beforehand, by a search of its own on --task.

    python benchmarks/first_search.py [--task examples/discontinuous-1d] [--other examples/epidemic-sir] [--repeat 3]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from figures import record  # noqa: E402 - benchmarks/figures.py, beside this script

ROOT = Path(__file__).resolve().parent.parent
GOAL_S = 5.0


def evolve(var_dir: Path, task: str) -> tuple[float, float, Path]:
    """(launch time, exit time, the search's folder) of one fresh ``manage.py evolve``."""
    env = {**os.environ, "TRELLIS_VAR_DIR": str(var_dir), "TRELLIS_EXECUTOR": "subprocess",
           "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    before = set((var_dir / "runs").glob("*")) if (var_dir / "runs").exists() else set()
    started = time.time()
    done = subprocess.run([sys.executable, "manage.py", "evolve", task, "--search", "mimosa", "--iterations", "1",
                           "--no-single-agent", "--gate", "automatic"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)
    if done.returncode:
        raise SystemExit(f"evolve failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    folder = next(p for p in (var_dir / "runs").glob("*") if p not in before and (p / "search.jsonl").exists())
    return started, time.time(), folder


def marks(started: float, ended: float, folder: Path) -> dict[str, float]:
    events = [json.loads(line) for line in (folder / "search.jsonl").read_text().splitlines()]
    for trace in sorted(folder.glob("probes/*/trace.jsonl")):
        events += [json.loads(line) for line in trace.read_text().splitlines()]
    first = lambda kind: min(e["ts"] for e in events if e["kind"] == kind)  # noqa: E731
    return {"ready": first("search_started") - started, "first answer": first("model_call") - started,
            "done": ended - started}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="examples/discontinuous-1d")
    parser.add_argument("--other", default="examples/epidemic-sir", help="a task new to the archive")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    cases = {"same task again": args.task, "a task new to it": args.other}
    rows: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="trellis-first-search-") as tmp:
        base = Path(tmp) / "base"
        base.mkdir()
        subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, check=True,
                       env={**os.environ, "TRELLIS_VAR_DIR": str(base)})
        evolve(base, args.task)  # the archive's one entry
        for n in range(args.repeat):
            for case, task in cases.items():
                # a copy each time: a search archives its task, which would make the next "new" task known
                var_dir = Path(tmp) / f"{case.replace(' ', '-')}-{n}"
                shutil.copytree(base, var_dir, ignore=shutil.ignore_patterns("redis", "*.sock"))
                for name, seconds in marks(*evolve(var_dir, task)).items():
                    rows.setdefault((case, name), []).append(seconds)
    print(f"first search in a fresh process (archive holding {args.task}; Mimosa, 1 iteration, offline model; "
          f"median of {args.repeat})\n")
    print(f"{'case':<18}{'from launch to':<16}{'median s':>10}{'min-max s':>16}   goal")
    for (case, name), values in rows.items():
        goal = f"< {GOAL_S:g} s" if name == "first answer" else ""
        verdict = ("met" if statistics.median(values) < GOAL_S else "NOT met") if goal else ""
        if goal:
            record(f"first search in a fresh process, {case}: first answer (median)", statistics.median(values),
                   "s", GOAL_S)
        print(f"{case:<18}{name:<16}{statistics.median(values):>10.2f}{min(values):>8.2f}-{max(values):<7.2f}   "
              f"{goal} {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
