"""Generate the pendulum-extrapolation task data (provenance script; deterministic).

Simulated laboratory experiment: a bob on a light rigid rod, released from rest at an
amplitude theta0 and timed over ten swings. The true period is that of the ideal (point
mass, frictionless) pendulum at any amplitude,

    T(L, theta0) = 4 * sqrt(L / g) * K(m),   m = sin(theta0 / 2)**2,  g = 9.81 m/s^2,

where K is the complete elliptic integral of the first kind (scipy.special.ellipk, which takes
the parameter m = k**2). It reduces to 2*pi*sqrt(L/g) for small amplitudes and is ~37 % longer
at 120 degrees. The bob's mass does not enter it; it is recorded, as a lab notebook would.

Inputs: 800 experiments with length L uniform on [0.10, 2.00] m (recorded to the millimetre),
amplitude uniform on [5, 120] degrees (recorded to 0.5 degree) and bob mass uniform on
[0.05, 1.00] kg (recorded to the gram). The true period uses the recorded values.

Split (extrapolation in length): experiments with L below the 70 % point of the length range
(0.10 + 0.7 * 1.90 = 1.43 m) are the training set; the longer ones are the test set.

Training targets are measured: each period is the mean of ten timed swings, so it carries
Gaussian noise with a standard deviation of 0.005 s (stopwatch) plus 0.3 % of the period
(release-angle and timing-gate errors), independently per experiment.
Held-out targets are the exact, noise-free periods at the recorded test inputs.

Usage: python make_data.py [OUTPUT_DIR]   (default: the folder containing this script)
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.special import ellipk

SEED = 20240612
N_EXPERIMENTS = 800
G = 9.81  # m/s^2
LENGTH_RANGE = (0.10, 2.00)  # m
AMPLITUDE_RANGE = (5.0, 120.0)  # degrees
MASS_RANGE = (0.05, 1.00)  # kg
TRAIN_FRACTION_OF_RANGE = 0.7
NOISE_ABS = 0.005  # s
NOISE_REL = 0.003
FEATURES = ["length_m", "amplitude_deg", "mass_kg"]
TARGET = "period_s"


def true_period(length_m: np.ndarray, amplitude_deg: np.ndarray) -> np.ndarray:
    """Exact period of an ideal pendulum released from rest at the given amplitude."""
    m = np.sin(np.radians(amplitude_deg) / 2.0) ** 2
    return 4.0 * np.sqrt(length_m / G) * ellipk(m)


def experiments(rng: np.random.Generator) -> pd.DataFrame:
    frame = pd.DataFrame({
        "length_m": np.round(rng.uniform(*LENGTH_RANGE, N_EXPERIMENTS), 3),
        "amplitude_deg": np.round(2.0 * rng.uniform(*AMPLITUDE_RANGE, N_EXPERIMENTS)) / 2.0,
        "mass_kg": np.round(rng.uniform(*MASS_RANGE, N_EXPERIMENTS), 3),
    })
    frame[TARGET] = true_period(frame["length_m"].to_numpy(), frame["amplitude_deg"].to_numpy())
    return frame


def write(out_dir: Path) -> None:
    rng = np.random.default_rng(SEED)
    frame = experiments(rng)
    cut = LENGTH_RANGE[0] + TRAIN_FRACTION_OF_RANGE * (LENGTH_RANGE[1] - LENGTH_RANGE[0])
    train = frame[frame["length_m"] < cut].reset_index(drop=True)
    test = frame[frame["length_m"] >= cut].reset_index(drop=True)  # rows stay in experiment order
    exact = train[TARGET].to_numpy()
    noise_sd = np.sqrt(NOISE_ABS ** 2 + (NOISE_REL * exact) ** 2)
    train[TARGET] = exact + noise_sd * rng.standard_normal(len(train))
    ids = np.arange(len(test))

    (out_dir / "data").mkdir(parents=True, exist_ok=True)
    (out_dir / "heldout").mkdir(parents=True, exist_ok=True)
    fmt = "%.10g"  # fixed formatting so reruns are byte-identical
    train[FEATURES + [TARGET]].to_csv(out_dir / "data" / "train.csv", index=False, float_format=fmt)
    test_features = test[FEATURES].copy()
    test_features.insert(0, "id", ids)
    test_features.to_csv(out_dir / "data" / "test_features.csv", index=False, float_format=fmt)
    pd.DataFrame({"id": ids, TARGET: test[TARGET]}).to_csv(
        out_dir / "heldout" / "test_targets.csv", index=False, float_format=fmt)


if __name__ == "__main__":
    write(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent)
