"""How long does preflight take to answer, on a cold start? For every task folder in examples/,
as shipped and broken one way at a time (a missing target column, a missing id column, a wrong
file role, evaluate.py printing another metric name, evaluate.py crashing), each case in a fresh
Python process with no preflight cache:

- cold: the first preflight() call (what `run_task` and `evolve` wait for before any model call);
- warm: a second call in the same process (evaluate.py's answer is remembered);
- data: reading and checking the data files;
- evaluate.py: its run on the tiny truth/prediction pair, from start until read (or stopped);
- import: importing engine.preflight in the fresh process.

Issue 11 asks that every problem be reported in under a second: the last column says whether it was.

    python benchmarks/preflight.py [--tasks discontinuous-1d wine-cultivar] [--repeat 3]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUDGET_S = 1.0

# Run in a fresh interpreter: a cold start is what a user's first command pays.
PROBE = r"""
import json, sys, time
started = time.perf_counter()
from engine.preflight import PreflightError, preflight
from engine.task import load_task
imported = time.perf_counter() - started
task = load_task(sys.argv[1])
out = {"import": imported}
for label in ("cold", "warm"):
    t = time.perf_counter()
    try:
        facts = preflight(task)
        result, timings = "ok", getattr(facts, "timings", None)
    except PreflightError as exc:
        result, timings = f"{len(exc.problems)} problem(s): {exc.problems[0][:70]}", getattr(exc, "timings", None)
    out[label] = time.perf_counter() - t
    out[label + "_timings"] = timings
    out["result"] = result
print(json.dumps(out))
"""


def _drop_column(csv_path: Path, column: str) -> None:
    import pandas as pd

    pd.read_csv(csv_path).drop(columns=[column]).to_csv(csv_path, index=False)


def _config(folder: Path) -> dict:
    return json.loads((folder / "Data_config.json").read_text())


def break_missing_target(folder: Path) -> None:
    cfg = _config(folder)
    _drop_column(folder / cfg["files"]["train"], cfg["target"])


def break_missing_id(folder: Path) -> None:
    cfg = _config(folder)
    _drop_column(folder / cfg["files"]["test_features"], cfg["id_column"])


def break_file_role(folder: Path) -> None:
    cfg = _config(folder)
    cfg["files"] = {("training" if role == "train" else role): path for role, path in cfg["files"].items()}
    (folder / "Data_config.json").write_text(json.dumps(cfg))


def break_metric_name(folder: Path) -> None:
    path = folder / "evaluate.py"
    source, n = re.subn(r'^METRIC = "([^"]+)"', 'METRIC = "not_the_declared_metric"', path.read_text(), flags=re.M)
    if n != 1:
        raise ValueError(f"{path}: no single METRIC = \"...\" line to change")
    path.write_text(source)


def break_evaluate_crash(folder: Path) -> None:
    path = folder / "evaluate.py"
    source = path.read_text()
    if "import pandas as pd\n" not in source:
        raise ValueError(f"{path}: no pandas import to crash after")
    path.write_text(source.replace("import pandas as pd\n", "import pandas as pd\nraise SystemExit('the answer "
                                   "key is unreadable')\n", 1))


CASES = {"as shipped": None, "missing target column": break_missing_target, "missing id column": break_missing_id,
         "wrong file role": break_file_role, "evaluate.py metric name": break_metric_name,
         "evaluate.py crashes": break_evaluate_crash}


def measure(folder: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    proc = subprocess.run([sys.executable, "-c", PROBE, str(folder)], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"preflight probe failed on {folder}: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _s(seconds: float) -> str:
    """A timing column; '-' where that stage never ran (the check ended before it)."""
    return f"{'-':>7}" if seconds != seconds else f"{seconds:>7.3f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="*", help="example folder names (default: all)")
    parser.add_argument("--repeat", type=int, default=3, help="fresh processes per case; the median is shown")
    args = parser.parse_args()
    folders = sorted(p for p in (ROOT / "examples").iterdir() if (p / "Data_config.json").is_file()
                     and (not args.tasks or p.name in args.tasks))
    header = f"{'task':<24} {'case':<24} {'cold s':>7} {'warm s':>7} {'data s':>7} {'eval s':>7} {'import s':>8}  " \
             f"{'<1s':<4} result"
    print(header)
    print("-" * len(header))
    slow = 0
    with tempfile.TemporaryDirectory(prefix="trellis-preflight-bench-") as tmp:
        for folder in folders:
            for case, breaker in CASES.items():
                copy = Path(tmp) / f"{folder.name}-{len(os.listdir(tmp))}"
                shutil.copytree(folder, copy)
                if breaker is not None:
                    breaker(copy)
                runs = [measure(copy) for _ in range(args.repeat)]
                med = lambda key: statistics.median(r[key] for r in runs)  # noqa: E731
                timing = lambda key: statistics.median((r["cold_timings"] or {}).get(key, float("nan"))  # noqa: E731
                                                       for r in runs)
                result = runs[-1]["result"]
                problem = result != "ok"
                fast = med("cold") < BUDGET_S
                slow += problem and not fast
                print(f"{folder.name:<24} {case:<24} {med('cold'):>7.3f} {med('warm'):>7.3f} {_s(timing('data'))} "
                      f"{_s(timing('evaluate'))} {med('import'):>8.3f}  {('yes' if fast else 'NO'):<4} {result}")
    print(f"\n{os.cpu_count()} CPU(s); median of {args.repeat} fresh process(es) per case; eval s is evaluate.py's "
          "run until read, or until stopped when the answer was already known.")
    return 1 if slow else 0


if __name__ == "__main__":
    sys.exit(main())
