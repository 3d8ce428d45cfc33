"""Generate the dam-break-neural task data (provenance script; deterministic).

Simulated flume experiment: a dam separating still water of depth 1 (upstream, x < 0) from
still water of depth 0.1 (downstream, x > 0) is removed at t = 0. Variables are dimensionless:
depths in units of the upstream depth h0, x in units of h0, t in units of sqrt(h0 / g).

The depth h(x, t) is the exact solution of the one-dimensional shallow-water equations for
this Riemann problem (Stoker's wet-bed dam break). It depends on x / t only and has four parts:

    h = 1                               for x / t <= -1             (undisturbed upstream water)
    h = (2 - x / t)**2 / 9              for -1 < x / t <= u_m - c_m (rarefaction wave)
    h = h_m                             for u_m - c_m < x / t <= s  (plateau behind the bore)
    h = 0.1                             for x / t > s               (undisturbed downstream water)

where the plateau depth h_m (c_m = sqrt(h_m), u_m = 2 * (1 - c_m)) makes the rarefaction's
velocity equal the velocity behind a bore moving into still water of depth 0.1,
u_m = (h_m - 0.1) * sqrt((h_m + 0.1) / (2 * h_m * 0.1)), solved with scipy's brentq, and the bore
moves at s = h_m * u_m / (h_m - 0.1). Here h_m = 0.3962 and s = 0.9914: the depth is continuous
with a kink at each end of the rarefaction wave and jumps from 0.396 to 0.1 across the bore,
whose position x = s * t moves with time.

Training data: 800 gauge readings at (x, t) drawn uniformly at random on [-1.2, 1.2] x
[0.1, 1.0], with Gaussian measurement noise of standard deviation 0.005 on the depth.
Test data: a regular grid of 81 positions by 31 times over the same window (2511 points), with
the exact, noise-free depths as held-out targets.

Usage: python make_data.py [OUTPUT_DIR]   (default: the folder containing this script)
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import brentq

SEED = 20261204
N_TRAIN = 800
X_RANGE = (-1.2, 1.2)
T_RANGE = (0.1, 1.0)
GRID = (81, 31)  # test positions x times
NOISE_SIGMA = 0.005
H_UP, H_DOWN = 1.0, 0.1  # still-water depths on either side of the dam (g = 1, h0 = 1)


def plateau() -> tuple[float, float]:
    """(h_m, s): the depth between the rarefaction and the bore, and the bore's speed."""
    def mismatch(h: float) -> float:
        rarefaction = 2.0 * (np.sqrt(H_UP) - np.sqrt(h))
        bore = (h - H_DOWN) * np.sqrt((h + H_DOWN) / (2.0 * h * H_DOWN))
        return rarefaction - bore

    h_m = brentq(mismatch, H_DOWN, H_UP, xtol=1e-14)
    u_m = 2.0 * (np.sqrt(H_UP) - np.sqrt(h_m))
    return h_m, h_m * u_m / (h_m - H_DOWN)


def depth(x: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Exact water depth of the wet-bed dam break at position x and time t > 0."""
    h_m, s = plateau()
    c_up, c_m = np.sqrt(H_UP), np.sqrt(h_m)
    tail = 2.0 * (c_up - c_m) - c_m  # u_m - c_m: where the rarefaction meets the plateau
    xi = x / t
    fan = (2.0 * c_up - xi) ** 2 / 9.0
    return np.where(xi <= -c_up, H_UP, np.where(xi <= tail, fan, np.where(xi <= s, h_m, H_DOWN)))


def write(out_dir: Path) -> None:
    rng = np.random.default_rng(SEED)
    x_train = rng.uniform(*X_RANGE, N_TRAIN)
    t_train = rng.uniform(*T_RANGE, N_TRAIN)
    h_train = depth(x_train, t_train) + NOISE_SIGMA * rng.standard_normal(N_TRAIN)
    grid_x, grid_t = np.meshgrid(np.linspace(*X_RANGE, GRID[0]), np.linspace(*T_RANGE, GRID[1]))
    x_test, t_test = grid_x.ravel(), grid_t.ravel()
    ids = np.arange(len(x_test))

    (out_dir / "data").mkdir(parents=True, exist_ok=True)
    (out_dir / "heldout").mkdir(parents=True, exist_ok=True)
    fmt = "%.12g"  # fixed formatting so reruns are byte-identical
    pd.DataFrame({"x": x_train, "t": t_train, "h": h_train}).to_csv(
        out_dir / "data" / "train.csv", index=False, float_format=fmt)
    pd.DataFrame({"id": ids, "x": x_test, "t": t_test}).to_csv(
        out_dir / "data" / "test_features.csv", index=False, float_format=fmt)
    pd.DataFrame({"id": ids, "h": depth(x_test, t_test)}).to_csv(
        out_dir / "heldout" / "test_targets.csv", index=False, float_format=fmt)


if __name__ == "__main__":
    write(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent)
