"""Generate the soil-respiration-sites task data (provenance script; deterministic).

Simulated field campaign: soil CO2 efflux (respiration) measured with closed chambers at 16
sites of a monitoring network over one growing season. Each measurement records the soil
temperature and volumetric water content next to the chamber; each site's soil organic
carbon was measured once.

Expected flux at site s (umol CO2 m^-2 s^-1):

    R = R10_s * exp(E0 * (1 / (T_REF - T0) - 1 / (T - T0))) * f(theta)

- temperature response: Lloyd & Taylor (1994, Functional Ecology 8:315), T in kelvin,
  E0 = 308.56 K, T_REF = 283.15 K (10 degC), T0 = 227.13 K;
- moisture response: f(theta) = (theta / THETA_OPT) * exp(1 - theta / THETA_OPT), equal to 1
  at THETA_OPT = 0.30 m3/m3 and lower in drier (substrate-limited) and wetter (oxygen-limited)
  soil;
- base rate at 10 degC: R10_s = 1.2 * SOC_s**0.6 * exp(u_s), where SOC_s (% soil organic
  carbon) is drawn uniformly on [0.8, 6.0] and u_s ~ N(0, 0.12**2) is the site's own deviation
  (roots, microbial community, texture) that nothing recorded explains.

Each site has its own climate: a soil-temperature range [low, low + span] with low uniform on
[0, 8] degC and span uniform on [12, 22] degC, and a typical water content uniform on
[0.12, 0.40] m3/m3 with a within-site spread of 0.06 (clipped to [0.03, 0.55]). Sites have
40 to 80 measurements each (uniform). Every measured flux carries multiplicative log-normal
chamber error, exp(N(0, 0.12**2)). Temperatures are recorded to 0.1 degC, water contents to
0.001 m3/m3, carbon to 0.01 %.

Split (by group): four whole sites are held out for testing. They are drawn at random among
the sites whose soil carbon is neither the lowest nor the highest of the network, so the test
sites are ordinary members of it, not extremes; the other twelve sites are the training set.
Held-out targets are the measured (noisy) fluxes, as a field campaign would have them.

Usage: python make_data.py [OUTPUT_DIR]   (default: the folder containing this script)
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

SEED = 20240615
N_SITES = 16
N_TEST_SITES = 4
ROWS_PER_SITE = (40, 80)
E0, T_REF, T0 = 308.56, 283.15, 227.13  # Lloyd & Taylor (1994)
THETA_OPT = 0.30
SITE_EFFECT_SD = 0.12
CHAMBER_ERROR_SD = 0.12
FEATURES = ["site", "soil_temp_c", "soil_moisture", "soil_carbon_pct"]
TARGET = "respiration"


def expected_flux(temp_c: np.ndarray, moisture: np.ndarray, base_rate: np.ndarray) -> np.ndarray:
    """Lloyd-Taylor temperature response times a moisture optimum curve."""
    temp_k = temp_c + 273.15
    temperature = np.exp(E0 * (1.0 / (T_REF - T0) - 1.0 / (temp_k - T0)))
    water = (moisture / THETA_OPT) * np.exp(1.0 - moisture / THETA_OPT)
    return base_rate * temperature * water


def campaign(rng: np.random.Generator) -> tuple[pd.DataFrame, np.ndarray]:
    """All measurements of all sites, and the test sites' codes."""
    carbon = np.round(rng.uniform(0.8, 6.0, N_SITES), 2)
    base_rate = 1.2 * carbon ** 0.6 * np.exp(SITE_EFFECT_SD * rng.standard_normal(N_SITES))
    temp_low, temp_span = rng.uniform(0.0, 8.0, N_SITES), rng.uniform(12.0, 22.0, N_SITES)
    wet = rng.uniform(0.12, 0.40, N_SITES)
    frames = []
    for s in range(N_SITES):
        n = int(rng.integers(ROWS_PER_SITE[0], ROWS_PER_SITE[1] + 1))
        temp = np.round(rng.uniform(temp_low[s], temp_low[s] + temp_span[s], n), 1)
        moisture = np.round(np.clip(wet[s] + 0.06 * rng.standard_normal(n), 0.03, 0.55), 3)
        flux = expected_flux(temp, moisture, base_rate[s]) * np.exp(CHAMBER_ERROR_SD * rng.standard_normal(n))
        frames.append(pd.DataFrame({"site": s + 1, "soil_temp_c": temp, "soil_moisture": moisture,
                                    "soil_carbon_pct": carbon[s], TARGET: flux}))
    ordinary = np.argsort(carbon)[1:-1] + 1  # site codes, lowest and highest carbon left out
    test_sites = np.sort(rng.choice(ordinary, N_TEST_SITES, replace=False))
    return pd.concat(frames, ignore_index=True), test_sites


def write(out_dir: Path) -> None:
    rng = np.random.default_rng(SEED)
    frame, test_sites = campaign(rng)
    held_out = frame["site"].isin(test_sites)
    train = frame[~held_out].reset_index(drop=True)
    test = frame[held_out].reset_index(drop=True)
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
