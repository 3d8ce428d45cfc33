"""Start-to-exit overhead of the Docker executor against the subprocess sandbox.

Programs run through the executors exactly as the engine runs generated code (``Executor.run``:
the working directory laid out, the program confined, its files hashed, the container removed),
timed from the call to its return:

* a trivial program (``print``), the median of ``--trivial-runs`` runs after one warm-up each:
  the fixed cost of a sandbox. Docker is timed four ways, each against the subprocess sandbox
  timed the same way:
  - with its warm pool at the default settings (``TRELLIS_SANDBOX_WARM``, 2 ready containers per
    set of limits), the requests ``--gap`` seconds apart (0.3 s: a model call between two programs
    is longer still), so the container used next is started while nothing is timed;
  - the same pool with the requests back to back: the pool makes its next container while the
    program before runs, and a request waits for it when it is not ready yet (it shows whether
    making one keeps up with the requests), and the same with one ready (``TRELLIS_SANDBOX_WARM=1``);
  - cold (``TRELLIS_SANDBOX_WARM=0``): a container created and started for each program.
  The issue's goal (#29) is the warm pool's cost at most twice the subprocess sandbox's (the cold
  row is shown for comparison, without a goal).
* a training program of about ``--train-seconds`` (full-batch gradient descent of a small
  numpy MLP, a fixed number of steps calibrated on this machine first, so both executors do
  the same work), on the warm pool (a container for its limits made ready beforehand, as it is
  for every program of a run after the first): whether the sandbox slows the work itself.

    python benchmarks/sandbox_overhead.py [--trivial-runs 10] [--train-seconds 30] [--training-runs 1] [--gap 0.3]

Needs a Docker daemon and the sandbox image (``python -m engine.sandbox.image build``); the warm
pool needs the engine to run as root (elsewhere every Docker row is cold).
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
from figures import record  # noqa: E402 - benchmarks/figures.py, beside this script

TRIVIAL = "print('ok')\n"
GOAL = 2.0  # issue 29: the Docker sandbox at most twice the subprocess sandbox for a trivial program

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
    started = time.perf_counter()
    result = executor.run(ExecutionRequest(code=code, limits=limits_for(wall)))
    took = time.perf_counter() - started
    if not result.ok:
        raise SystemExit(f"{executor.name}: the program ended {result.status}: {result.stderr[-500:]}")
    if compute is not None:
        compute.append(float(result.stdout.split("compute")[1]))
    return took


def limits_for(wall: float) -> ExecutionLimits:
    return ExecutionLimits(wall_seconds=wall, cpu_seconds=int(wall) + 10)


def trivial_runs(executor, runs: int, gap: float) -> list[float]:
    """One warm-up (page cache, image layers; the pool's first container), then ``runs`` timed
    runs, each after ``gap`` seconds of nothing (untimed)."""
    timed(executor, TRIVIAL, 60)
    took = []
    for _ in range(runs):
        time.sleep(gap)
        took.append(timed(executor, TRIVIAL, 60))
    return took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trivial-runs", type=int, default=10)
    parser.add_argument("--train-seconds", type=float, default=30.0)
    parser.add_argument("--training-runs", type=int, default=1)
    parser.add_argument("--gap", type=float, default=0.3, help="seconds between two spaced requests")
    args = parser.parse_args()

    from engine.sandbox.docker_executor import DockerExecutor
    from engine.sandbox.subprocess_executor import SubprocessExecutor

    root = Path(tempfile.mkdtemp(prefix="trellis-sandbox-overhead-"))
    try:
        docker = DockerExecutor(root / "docker", keep=False)  # the default settings: the warm pool
        cold = DockerExecutor(root / "docker-cold", keep=False, warm=0)
        one = DockerExecutor(root / "docker-warm1", keep=False, warm=1)
    except ImageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    sub = SubprocessExecutor(root / "subprocess", keep=False)
    try:
        rows, notes = measure(args, sub, docker, cold, one)
    finally:
        for executor in (docker, cold, one):
            executor.close()
    print(f"{'program':<60} {'subprocess':>11} {'docker':>9} {'ratio':>7} {'goal':>12} {'docker extra':>13}")
    for label, (sub_s, dock_s), goal in rows:
        verdict = "-" if goal is None else f"<={goal:g}x " + ("met" if dock_s / sub_s <= goal else "MISSED")
        print(f"{label:<60} {sub_s:>10.3f}s {dock_s:>8.3f}s {dock_s / sub_s:>6.2f}x {verdict:>12} "
              f"{dock_s - sub_s:>+12.3f}s")
    for line in notes:
        print(line)
    for label, (sub_s, dock_s), goal in rows:  # for benchmarks/performance.py's table
        if label.startswith("trivial"):
            record(f"Docker sandbox / subprocess sandbox, {label.split(' (')[0]}", dock_s / sub_s, "x", goal,
                   note=f"docker {dock_s:.3f} s, subprocess {sub_s:.3f} s")
    print(f"docker image {docker.image}, {docker.cpus:g} CPU quota, warm pool of {docker.pool.size} per set of "
          f"limits; numpy {np.__version__}; {os.cpu_count()} CPUs here")
    return 0


def measure(args, sub, docker, cold, one) -> tuple[list, list[str]]:
    n = args.trivial_runs
    rows, notes = [], []
    modes = ((f"trivial, {args.gap:g} s apart, warm pool (median of {n})", docker, args.gap, GOAL),
             (f"trivial, back to back, warm pool (median of {n})", docker, 0.0, GOAL),
             # one ready container: not the default, shown for what the second one buys
             (f"trivial, back to back, TRELLIS_SANDBOX_WARM=1 (median of {n})", one, 0.0, None),
             (f"trivial, cold: TRELLIS_SANDBOX_WARM=0 (median of {n})", cold, 0.0, None))  # the pool's baseline
    for label, executor, gap, goal in modes:
        hits, misses = executor.pool.hits, executor.pool.misses
        sub_times = trivial_runs(sub, n, gap)
        dock_times = trivial_runs(executor, n, gap)
        rows.append((label, (statistics.median(sub_times), statistics.median(dock_times)), goal))
        notes.append(f"  {label.split(' (')[0]}: min-max subprocess {min(sub_times):.3f}-{max(sub_times):.3f} s, "
                     f"docker {min(dock_times):.3f}-{max(dock_times):.3f} s; warm containers used "
                     f"{executor.pool.hits - hits}, cold starts {executor.pool.misses - misses} (warm-up included)")

    steps = calibrate(args.train_seconds)
    training = TRAINING.format(steps=steps)
    wall = args.train_seconds * 4 + 60
    train: dict[str, list[float]] = {"subprocess": [], "docker": []}
    compute: dict[str, list[float]] = {"subprocess": [], "docker": []}
    for _ in range(args.training_runs):  # interleaved, so a busy moment of the machine hits both
        for ex in (sub, docker):
            if ex is docker:  # its container ready, as for every program of a run after the first
                docker.prewarm(limits_for(wall))
                docker.pool.settle()
            train[ex.name].append(timed(ex, training, wall, compute[ex.name]))
    rows.append((f"training, {steps} steps (~{args.train_seconds:g} s; median of {args.training_runs})",
                 (statistics.median(train["subprocess"]), statistics.median(train["docker"])), None))
    rows.append(("  of which the training loop, timed inside",
                 (statistics.median(compute["subprocess"]), statistics.median(compute["docker"])), None))
    return rows, notes


if __name__ == "__main__":
    sys.exit(main())
