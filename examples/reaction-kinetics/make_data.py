"""Generate the reaction-kinetics task data (provenance script; deterministic).

Simulated batch experiments on consecutive first-order reactions

    A --k1--> B --k2--> C

in a well-stirred batch reactor at constant temperature. Each experiment starts from pure A at
concentration A0 (mol/L), with no B or C, and an analyst samples the vessel at irregular times
(minutes) and measures the intermediate B. The concentrations obey

    dA/dt = -k1 A,    dB/dt = k1 A - k2 B,    dC/dt = k2 B,    A(0) = A0, B(0) = C(0) = 0,

whose solution for B (k1 != k2) is B(t) = A0 k1 / (k2 - k1) * (exp(-k1 t) - exp(-k2 t)).
The task is to estimate k1 and k2 (per minute); law.py states this law as code.

- true rate constants: K1 = 0.3418 /min and K2 = 0.1163 /min (B peaks near 4.7 min);
- 12 training experiments, A0 log-uniform on [0.25, 2.0] mol/L (rounded to 3 decimals);
- 8 to 12 sampling times per experiment, log-uniform on [0.3, 45] min (rounded to 0.1 min,
  distinct), so every experiment has points on the rise of B and on its late decay;
- measurement: B_obs = B (1 + 0.04 e1) + 0.002 e2 with e1, e2 ~ N(0, 1) (4 % multiplicative
  error, a 0.002 mol/L detection floor), recorded to 4 significant digits and never below 0;
- test_features.csv: 3 new experiments (13-15) with other starting concentrations and 4 query
  times each; their B is not needed by evaluate.py, which scores the parameters against
  heldout/true_parameters.csv. (A program writes reproduction.csv for those rows; Trellis uses
  the same file on its in-loop folds, where the rows are held-out training rows.)

Usage: python make_data.py [OUTPUT_DIR]   (default: the folder containing this script)
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

SEED = 20240930
K1, K2 = 0.3418, 0.1163  # per minute
N_TRAIN_EXPERIMENTS = 12
N_TEST_EXPERIMENTS = 3
A0_RANGE = (0.25, 2.0)       # mol/L
TIME_RANGE = (0.3, 45.0)     # minutes
SAMPLES = (8, 12)            # sampling times per training experiment
TEST_TIMES = 4
RELATIVE_NOISE = 0.04
FLOOR_NOISE = 0.002          # mol/L


def b_exact(a0: np.ndarray, t: np.ndarray, k1: float = K1, k2: float = K2) -> np.ndarray:
    """B(t) of A -> B -> C from pure A (closed form, k1 != k2)."""
    return a0 * k1 / (k2 - k1) * (np.exp(-k1 * t) - np.exp(-k2 * t))


def sample_times(rng: np.random.Generator, n: int) -> np.ndarray:
    while True:
        t = np.round(np.exp(rng.uniform(np.log(TIME_RANGE[0]), np.log(TIME_RANGE[1]), n)), 1)
        if len(np.unique(t)) == n:
            return np.sort(t)


def experiments(rng: np.random.Generator, first: int, count: int, samples) -> pd.DataFrame:
    rows = []
    for e in range(first, first + count):
        a0 = round(float(np.exp(rng.uniform(np.log(A0_RANGE[0]), np.log(A0_RANGE[1])))), 3)
        n = samples if isinstance(samples, int) else int(rng.integers(samples[0], samples[1] + 1))
        for t in sample_times(rng, n):
            rows.append({"experiment": e, "A0": a0, "t_min": float(t)})
    return pd.DataFrame(rows)


def measure(frame: pd.DataFrame, rng: np.random.Generator) -> np.ndarray:
    b = b_exact(frame["A0"].to_numpy(), frame["t_min"].to_numpy())
    noisy = b * (1.0 + RELATIVE_NOISE * rng.standard_normal(len(b))) + FLOOR_NOISE * rng.standard_normal(len(b))
    return np.array([float(f"{v:.4g}") for v in np.maximum(noisy, 0.0)])


def write(out_dir: Path) -> None:
    rng = np.random.default_rng(SEED)
    train = experiments(rng, 1, N_TRAIN_EXPERIMENTS, SAMPLES)
    train["B"] = measure(train, rng)
    test = experiments(rng, N_TRAIN_EXPERIMENTS + 1, N_TEST_EXPERIMENTS, TEST_TIMES)
    test.insert(0, "id", np.arange(len(test)))

    (out_dir / "data").mkdir(parents=True, exist_ok=True)
    (out_dir / "heldout").mkdir(parents=True, exist_ok=True)
    fmt = "%.10g"  # fixed formatting so reruns are byte-identical
    train[["experiment", "A0", "t_min", "B"]].to_csv(out_dir / "data" / "train.csv", index=False, float_format=fmt)
    test[["id", "experiment", "A0", "t_min"]].to_csv(out_dir / "data" / "test_features.csv", index=False,
                                                     float_format=fmt)
    pd.DataFrame({"parameter": ["k1", "k2"], "value": [K1, K2]}).to_csv(
        out_dir / "heldout" / "true_parameters.csv", index=False, float_format=fmt)


if __name__ == "__main__":
    write(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent)
