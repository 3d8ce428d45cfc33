"""Generate the discontinuous-1d task data (provenance script; deterministic).

    f(x) = 0.2 * sin(6x)            for x <= 0
    f(x) = 1 + 0.1 * x * cos(18x)   for x >  0

Training data: 200 noisy samples (Gaussian noise, sigma = 0.01). 198 inputs are drawn
uniformly at random on [-1, 1]; the other two bracket the jump at x = -0.0008 and
x = +0.0008, as an experiment that has resolved the interface would (the solver is not told
which samples these are, or where the jump is). Why: with purely random inputs the jump
lies somewhere in an unsampled gap of typical width 0.02, which holds ~10 test-grid points
whose error no method can control; that luck would dominate the score. With the bracketing
pair the unresolved interval is narrower than the test-grid spacing (0.002), so the score
measures how well each side of the jump is approximated.

Test data: a uniform grid of 1000 points on [-1, 1] with the exact (noise-free) function
values as held-out targets.

Usage: python make_data.py [OUTPUT_DIR]   (default: the folder containing this script)
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

SEED = 20240611
N_TRAIN = 200
N_TEST = 1000
NOISE_SIGMA = 0.01
JUMP_BRACKET = (-0.0008, 0.0008)


def target_function(x: np.ndarray) -> np.ndarray:
    """Jump of size 1 at x = 0, with a different oscillation frequency on each side."""
    return np.where(x <= 0.0, 0.2 * np.sin(6.0 * x), 1.0 + 0.1 * x * np.cos(18.0 * x))


def write(out_dir: Path) -> None:
    rng = np.random.default_rng(SEED)
    x_random = rng.uniform(-1.0, 1.0, N_TRAIN - len(JUMP_BRACKET))
    # Insert the bracketing pair at random positions so row order reveals nothing.
    x_train = np.insert(x_random, rng.integers(0, len(x_random) + 1, len(JUMP_BRACKET)),
                        JUMP_BRACKET)
    y_train = target_function(x_train) + NOISE_SIGMA * rng.standard_normal(N_TRAIN)
    x_test = np.linspace(-1.0, 1.0, N_TEST)
    ids = np.arange(N_TEST)

    (out_dir / "data").mkdir(parents=True, exist_ok=True)
    (out_dir / "heldout").mkdir(parents=True, exist_ok=True)
    fmt = "%.12g"  # fixed formatting so reruns are byte-identical
    pd.DataFrame({"x": x_train, "y": y_train}).to_csv(
        out_dir / "data" / "train.csv", index=False, float_format=fmt)
    pd.DataFrame({"id": ids, "x": x_test}).to_csv(
        out_dir / "data" / "test_features.csv", index=False, float_format=fmt)
    pd.DataFrame({"id": ids, "y": target_function(x_test)}).to_csv(
        out_dir / "heldout" / "test_targets.csv", index=False, float_format=fmt)


if __name__ == "__main__":
    write(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent)
