"""Start-to-exit overhead of the Docker executor against the subprocess sandbox.

Two programs, each run through both executors exactly as the engine runs generated code
(``Executor.run``: the working directory laid out, the program confined, its files hashed, the
container removed), timed from the call to its return:

* a trivial program (``print``), the median of ``--trivial-runs`` runs after one warm-up each:
  the fixed cost of a sandbox;
* a training program of about ``--train-seconds`` (full-batch gradient descent of a small
  numpy MLP, a fixed number of steps calibrated on this machine first, so both executors do
  the same work): whether the sandbox slows the work itself.

    python benchmarks/sandbox_overhead.py [--trivial-runs 10] [--train-seconds 30] [--training-runs 1]

Needs a Docker daemon and the sandbox image (``python -m engine.sandbox.image build``).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("OMP_NUM_THREADS", "1")  # the sandboxes' setting, for the calibration here

import numpy as np  # noqa: E402

from engine.sandbox import ExecutionLimits, ExecutionRequest  # noqa: E402
from engine.sandbox.image import ImageError  # noqa: E402

TRIVIAL = "print('ok')\n"

TRAINING = """
import time
import numpy as np

STEPS = {steps}
rng = np.random.default_rng(0)
X = rng.normal(size=(4000, 64))
y = np.sin(X[:, :1] * 2) + 0.1 * rng.normal(size=(4000, 1))
W1, W2 = rng.normal(scale=0.1, size=(64, 256)), rng.normal(scale=0.1, size=(256, 1))
started = time.perf_counter()
for step in range(STEPS):
    H = np.tanh(X @ W1)
    error = H @ W2 - y
    grad_W2 = H.T @ error / len(X)
    grad_W1 = X.T @ ((error @ W2.T) * (1 - H ** 2)) / len(X)
    W1 -= 0.05 * grad_W1
    W2 -= 0.05 * grad_W2
print("steps", STEPS, "loss", float((error ** 2).mean()), "compute", time.perf_counter() - started)
"""


def calibrate(seconds: float) -> int:
    """How many steps of TRAINING take ``seconds`` here, measured in this process."""
    probe = TRAINING.replace("print(", "pass  # print(")
    started = time.perf_counter()
    exec(compile(probe.format(steps=20), "calibration", "exec"), {})
    per_step = (time.perf_counter() - started) / 20
    return max(1, round(seconds / per_step))


def timed(executor, code: str, wall: float, compute: list | None = None) -> float:
    """Seconds from the call to its return; ``compute`` gets the loop's own time, as the program
    measured it inside the sandbox."""
    limits = ExecutionLimits(wall_seconds=wall, cpu_seconds=int(wall) + 10)
    started = time.perf_counter()
    result = executor.run(ExecutionRequest(code=code, limits=limits))
    took = time.perf_counter() - started
    if not result.ok:
        raise SystemExit(f"{executor.name}: the program ended {result.status}: {result.stderr[-500:]}")
    if compute is not None:
        compute.append(float(result.stdout.split("compute")[1]))
    return took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trivial-runs", type=int, default=10)
    parser.add_argument("--train-seconds", type=float, default=30.0)
    parser.add_argument("--training-runs", type=int, default=1)
    args = parser.parse_args()

    from engine.sandbox.docker_executor import DockerExecutor
    from engine.sandbox.subprocess_executor import SubprocessExecutor

    root = Path(tempfile.mkdtemp(prefix="trellis-sandbox-overhead-"))
    try:
        docker = DockerExecutor(root / "docker", keep=False)
    except ImageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    executors = [SubprocessExecutor(root / "subprocess", keep=False), docker]
    steps = calibrate(args.train_seconds)
    training = TRAINING.format(steps=steps)
    rows = []
    trivial: dict[str, list[float]] = {}
    for ex in executors:
        timed(ex, TRIVIAL, 60)  # warm-up: page cache, image layers, imports
        trivial[ex.name] = [timed(ex, TRIVIAL, 60) for _ in range(args.trivial_runs)]
    rows.append((f"trivial program (median of {args.trivial_runs})",
                 {name: statistics.median(v) for name, v in trivial.items()}))
    train: dict[str, list[float]] = {ex.name: [] for ex in executors}
    compute: dict[str, list[float]] = {ex.name: [] for ex in executors}
    for _ in range(args.training_runs):  # interleaved, so a busy moment of the machine hits both
        for ex in executors:
            train[ex.name].append(timed(ex, training, args.train_seconds * 4 + 60, compute[ex.name]))
    rows.append((f"training, {steps} steps (~{args.train_seconds:g} s; median of {args.training_runs})",
                 {name: statistics.median(v) for name, v in train.items()}))
    rows.append(("  of which the training loop, timed inside",
                 {name: statistics.median(v) for name, v in compute.items()}))

    print(f"{'program':<48} {'subprocess':>11} {'docker':>9} {'ratio':>7} {'docker extra':>13}")
    for label, t in rows:
        sub, dock = t["subprocess"], t["docker"]
        print(f"{label:<48} {sub:>10.3f}s {dock:>8.3f}s {dock / sub:>6.2f}x {dock - sub:>+12.3f}s")
    spread = {name: f"{min(v):.3f}-{max(v):.3f} s" for name, v in trivial.items()}
    print(f"trivial runs, min-max: {spread}")
    print(f"docker image {docker.image}, {docker.cpus:g} CPU quota; numpy {np.__version__}; "
          f"{os.cpu_count()} CPUs here")
    return 0


if __name__ == "__main__":
    sys.exit(main())
