"""GPU check of the offline library's neural strategy: the same training on the CPU and, when CUDA
is present, on the GPU; time per epoch and final error of each.

It renders the very program the offline scientist writes for a task that allows a network
(mixture_of_experts, engine/offline/neural.py), runs it as a plain child process once with the GPU
hidden (CUDA_VISIBLE_DEVICES="") and once with it visible, times the per-epoch JSON lines as they
arrive, and scores the predictions against the task's held-out targets.

Standalone: torch, numpy and pandas, and this repository's engine/offline, which is pure Python
(standard library only: it only writes the program's source). No Django, no sandbox, no project
virtual environment. Without a CUDA device it prints the CPU row and "no CUDA device: skipped GPU
row", and exits 0.

    python benchmarks/gpu_check.py                       # 100 epochs on examples/dam-break-neural
    python benchmarks/gpu_check.py --epochs 300 --params '{"batch_size": 32}' --threads 4
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.offline.strategy import DataSpec
from engine.offline.strategies import get_strategy  # noqa: E402  (pure Python: renders source

STRATEGY = "mixture_of_experts"
METRIC_KEY = "trellis_metric"


def task_spec(folder: Path) -> tuple[DataSpec, dict]:
    """The task's data files and columns, from its Data_config.json."""
    config = json.loads((folder / "Data_config.json").read_text())
    spec = DataSpec(train_path=config["files"]["train"], test_path=config["files"]["test_features"],
                    target=config["target"], features=tuple(config.get("features", ())),
                    id_column=config["id_column"], predictions_file=config["predictions"]["file"])
    return spec, config


def run_program(code: str, folder: Path, spec: DataSpec, device: str, threads: int, timeout: float) -> dict:
    """Run the program in a fresh folder on ``device``; per-epoch arrival times and its metrics."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
           "OPENBLAS_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1"}
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""  # the program picks CUDA whenever it sees a device
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        work = Path(tmp)
        for rel in (spec.train_path, spec.test_path):
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(folder / rel, work / rel)
        (work / "main.py").write_text(code)
        started = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "main.py"], cwd=work, env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        epochs, arrivals, other = [], [], []
        for line in proc.stdout:  # timed as each line arrives (the program flushes every epoch)
            now = time.perf_counter()
            if line.startswith("{") and METRIC_KEY in line:
                epochs.append(json.loads(line)[METRIC_KEY])
                arrivals.append(now)
            else:
                other.append(line.rstrip())
        stderr = proc.stderr.read()
        code_ = proc.wait(timeout=timeout)
        wall = time.perf_counter() - started
        if code_ != 0:
            raise SystemExit(f"the program failed on {device} (exit {code_}):\n{stderr[-3000:]}")
        predictions = pd.read_csv(work / spec.predictions_file)
    return {"epochs": epochs, "arrivals": arrivals, "wall": wall, "stdout": other, "predictions": predictions}


def seconds_per_epoch(arrivals: list[float]) -> float:
    """Mean gap between epoch lines after the first (the first also pays imports and CUDA start-up)."""
    if len(arrivals) < 2:
        return float("nan")
    return (arrivals[-1] - arrivals[0]) / (len(arrivals) - 1)


def test_error(folder: Path, spec: DataSpec, predictions: pd.DataFrame) -> float:
    """Relative L2 error against the task's held-out targets; NaN when the folder has none."""
    targets = folder / "heldout" / "test_targets.csv"
    if not targets.is_file():
        return float("nan")
    truth = pd.read_csv(targets).set_index(spec.id_column)[spec.target]
    pred = predictions.set_index(spec.id_column)[spec.target].reindex(truth.index).to_numpy(dtype=float)
    true = truth.to_numpy(dtype=float)
    return float(np.linalg.norm(pred - true) / np.linalg.norm(true))


def printed(stdout: list[str], name: str) -> str:
    found = [line.split(":", 1)[1].strip() for line in stdout if line.startswith(name + ":")]
    return found[-1] if found else "-"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", type=Path, default=ROOT / "examples" / "dam-break-neural")
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--params", default="{}", help="other strategy parameters, as JSON")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (the program's own default is 1)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=1800.0)
    args = parser.parse_args(argv)
    if args.epochs < 2:
        parser.error("--epochs must be at least 2 (time per epoch is measured between epochs)")
    params = {**json.loads(args.params), "epochs": args.epochs}
    spec, _ = task_spec(args.task)
    code = get_strategy(STRATEGY).render(params, spec, args.seed)
    resolved = json.loads(code.split("\n", 1)[0].split(" ", 3)[3])

    cuda = torch.cuda.is_available()
    print(f"task {args.task.name}: {STRATEGY} {json.dumps(resolved, sort_keys=True)}, seed {args.seed}")
    print(f"torch {torch.__version__}; CPU threads {args.threads}; "
          + (f"CUDA device {torch.cuda.get_device_name(0)}" if cuda else "no CUDA device"))
    rows = []
    for device in ["cpu"] + (["cuda"] if cuda else []):
        result = run_program(code, args.task, spec, device, args.threads, args.timeout)
        last = result["epochs"][-1]
        rows.append((device, seconds_per_epoch(result["arrivals"]), result["wall"], len(result["epochs"]),
                     last["val"], printed(result["stdout"], "validation_rmse"),
                     test_error(args.task, spec, result["predictions"]),
                     printed(result["stdout"], "train_rows").split("device:")[-1].strip()))

    print()
    header = ("device", "s/epoch", "wall s", "epochs", "last val rmse", "best val rmse", "test rel_l2", "ran on")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for device, per_epoch, wall, n, last_val, best_val, error, ran_on in rows:
        print(f"| {device} | {per_epoch:.4f} | {wall:.1f} | {n} | {last_val:.5f} | {best_val} | {error:.5f} "
              f"| {ran_on} |")
    if len(rows) == 2:
        print(f"\nGPU speed-up per epoch: {rows[0][1] / rows[1][1]:.2f}x")
    else:
        print("\nno CUDA device: skipped GPU row")
    return 0


if __name__ == "__main__":
    sys.exit(main())
