"""Generate the epidemic-sir task data (provenance script; deterministic).

An influenza-like outbreak seeded in each of several towns, followed by the towns' health
offices, which report the number of people currently infectious every few days. Each town's
outbreak follows the SIR model (well-mixed, closed population N, no births or deaths):

    dS/dt = -beta S I / N,    dI/dt = beta S I / N - gamma I,    dR/dt = gamma I,
    S(0) = N - I0,  I(0) = I0,  R(0) = 0,

with t in days from the first report, beta the transmission rate and gamma the recovery rate
(per day; 1/gamma is the mean infectious period, beta/gamma the basic reproduction number).
The task is to estimate beta and gamma; Problem.md states the law in its text only.

- true rates: BETA = 0.38 /day and GAMMA = 0.14 /day (R0 = 2.71, infectious period 7.1 days);
- 9 training towns, population N log-uniform on [4,000, 120,000] (rounded to 10), I0 (the
  infectious people at the first report) uniform integers 2 to 25;
- reports on irregular days: every 2 to 6 days from day 0 to day 110 or so (about 30 per town);
- measurement: I_obs = round(I (1 + 0.08 e)), e ~ N(0, 1), never below 0 (under- and
  over-reporting of a few percent, whole people);
- test_features.csv: 3 new towns and 6 report days each; evaluate.py scores the parameters
  against heldout/true_parameters.csv, never these rows.

Usage: python make_data.py [OUTPUT_DIR]   (default: the folder containing this script)
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.integrate import solve_ivp

SEED = 20261206
BETA, GAMMA = 0.38, 0.14  # per day
N_TRAIN_TOWNS = 9
N_TEST_TOWNS = 3
POPULATION = (4_000, 120_000)
SEEDED = (2, 25)
GAP_DAYS = (2, 6)
LAST_DAY = 110
TEST_REPORTS = 6
RELATIVE_NOISE = 0.08


def infectious(n: float, i0: float, days: np.ndarray) -> np.ndarray:
    """I(t) of the SIR model at ``days`` (integrated tightly; the truth the reports scatter around)."""
    def rhs(t, y):
        s, i, _ = y
        return [-BETA * s * i / n, BETA * s * i / n - GAMMA * i, GAMMA * i]
    sol = solve_ivp(rhs, (0.0, float(days.max())), [n - i0, i0, 0.0], t_eval=days, method="LSODA",
                    rtol=1e-10, atol=1e-8)
    return sol.y[1]


def towns(rng: np.random.Generator, first: int, count: int, reports: int | None) -> pd.DataFrame:
    rows = []
    for town in range(first, first + count):
        n = int(round(float(np.exp(rng.uniform(*np.log(POPULATION)))), -1))
        i0 = int(rng.integers(SEEDED[0], SEEDED[1] + 1))
        if reports is None:
            days = [0]
            while days[-1] + GAP_DAYS[1] <= LAST_DAY:
                days.append(days[-1] + int(rng.integers(GAP_DAYS[0], GAP_DAYS[1] + 1)))
        else:
            days = sorted(rng.choice(np.arange(1, LAST_DAY), size=reports, replace=False).tolist())
        rows += [{"town": f"T{town:02d}", "N": n, "I0": i0, "day": d} for d in days]
    return pd.DataFrame(rows)


def measure(frame: pd.DataFrame, rng: np.random.Generator) -> np.ndarray:
    out = np.empty(len(frame))
    for _, idx in frame.groupby("town").groups.items():
        rows = frame.loc[idx]
        out[np.asarray(idx)] = infectious(float(rows["N"].iloc[0]), float(rows["I0"].iloc[0]),
                                          rows["day"].to_numpy(dtype=float))
    noisy = out * (1.0 + RELATIVE_NOISE * rng.standard_normal(len(out)))
    return np.maximum(np.round(noisy), 0).astype(int)


def write(out_dir: Path) -> None:
    rng = np.random.default_rng(SEED)
    train = towns(rng, 1, N_TRAIN_TOWNS, None)
    train["I"] = measure(train, rng)
    test = towns(rng, N_TRAIN_TOWNS + 1, N_TEST_TOWNS, TEST_REPORTS)
    test.insert(0, "id", np.arange(len(test)))

    (out_dir / "data").mkdir(parents=True, exist_ok=True)
    (out_dir / "heldout").mkdir(parents=True, exist_ok=True)
    train[["town", "N", "I0", "day", "I"]].to_csv(out_dir / "data" / "train.csv", index=False)
    test[["id", "town", "N", "I0", "day"]].to_csv(out_dir / "data" / "test_features.csv", index=False)
    pd.DataFrame({"parameter": ["beta", "gamma"], "value": [BETA, GAMMA]}).to_csv(
        out_dir / "heldout" / "true_parameters.csv", index=False, float_format="%.10g")


if __name__ == "__main__":
    write(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent)
