"""Run every offline strategy (first value of each hyperparameter) on every example task.

Usage: python benchmarks/strategy_table.py [--task NAME] [--seed N]

Each program runs in a fresh temporary directory holding only the task's data files (never
the held-out targets), exactly as the sandbox would run it; the task's own evaluate.py then
scores the predictions. Prints one row per (task, strategy): metric value and run time.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.offline.strategy import DataSpec, family_of, spec_of_task
from engine.offline.strategies import strategies_for  # noqa: E402
from engine.task import load_task  # noqa: E402

EXAMPLES = ROOT / "examples"


def load_spec(task_dir: Path) -> DataSpec:
    return spec_of_task(load_task(task_dir))


def run_program(task_dir: Path, spec: DataSpec, code: str, timeout: float = 120) -> dict:
    """Run ``code`` as main.py next to copies of the data files; score it if it succeeds."""
    with tempfile.TemporaryDirectory(prefix="trellis-bench-") as tmp:
        work = Path(tmp)
        for rel in (spec.train_path, spec.test_path):
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(task_dir / rel, work / rel)
        (work / "main.py").write_text(code)
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "main.py"], cwd=work, capture_output=True,
                              text=True, timeout=timeout)
        seconds = time.perf_counter() - start
        result = {"returncode": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr,
                  "seconds": seconds, "score": None}
        if proc.returncode == 0:
            scored = subprocess.run(
                [sys.executable, str(task_dir / "evaluate.py"), str(work / spec.predictions_file)],
                capture_output=True, text=True, timeout=60)
            if scored.returncode == 0:
                result["score"] = json.loads(scored.stdout)
            else:
                result["stderr"] += scored.stderr
        return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", help="only this example folder")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    tasks = sorted(p for p in EXAMPLES.iterdir() if (p / "Data_config.json").is_file())
    if args.task:
        tasks = [t for t in tasks if t.name == args.task]

    header = f"{'task':<22} {'strategy':<24} {'metric':<12} {'value':>10} {'seconds':>8}"
    print(header)
    print("-" * len(header))
    failures = 0
    for task_dir in tasks:
        spec = load_spec(task_dir)
        for strategy in strategies_for(family_of(spec)):
            code = strategy.render(strategy.default_params(), spec, seed=args.seed)
            result = run_program(task_dir, spec, code)
            score = result["score"]
            if score is None:
                failures += 1
                last = (result["stderr"].strip().splitlines() or ["?"])[-1]
                print(f"{task_dir.name:<22} {strategy.key:<24} FAILED: {last}")
                continue
            print(f"{task_dir.name:<22} {strategy.key:<24} {score['metric']:<12} "
                  f"{score['value']:>10.4f} {result['seconds']:>8.2f}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
