"""Generate the burgers-field task data (provenance script; deterministic).

The viscous Burgers equation on x in [-1, 1], t in [0, 1]:

    u_t + u u_x = nu u_xx,    nu = 0.02,
    u(x, 0) = -sin(pi x),     u(-1, t) = u(1, t) = 0   (pde.py states the same law as code).

The initial sine steepens: the flow moves right on the left half (u > 0) and left on the right
half, so the two sides run into each other at x = 0, where a stationary viscous shock (width
about 2 nu / |u|, a few hundredths) forms near t = 1 / pi and then slowly decays by diffusion.

The reference solution is exact, by the Cole-Hopf transform: u = -2 nu phi_x / phi turns the
equation into the heat equation phi_t = nu phi_xx with phi_x = 0 at both ends, and

    phi(x, 0) = exp(-cos(pi x) / (2 pi nu)) = I_0(z) + 2 sum_{n>=1} (-1)^n I_n(z) cos(n pi x),
    z = 1 / (2 pi nu)

(the generating function of the modified Bessel functions I_n), so every mode decays on its own:

    u(x, t) = 4 pi nu sum_n (-1)^n n I_n(z) e^{-nu n^2 pi^2 t} sin(n pi x)
              / (I_0(z) + 2 sum_n (-1)^n I_n(z) e^{-nu n^2 pi^2 t} cos(n pi x)).

The sums are taken over n = 1..200 (with exponentially scaled Bessel functions: the terms beyond
n = 60 underflow to 0), which reproduces the initial condition to 1e-10. The t = 0 row of the
targets is written from the initial condition itself and the x = +-1 columns as the boundary value
0, so that the file states them exactly (the series misses them by 1e-10 and 1e-16).

Independent check (``python make_data.py --check``, not run when writing the files): the method
of lines on pde.py itself (central differences, 2001 points, solve_ivp BDF with rtol 1e-10)
agrees with the series to a relative L2 difference of 1.7e-5 on the query grid (maximum 6.1e-5,
at the shock), and the difference falls fourfold with each halving of the grid spacing (4.1e-6
with 4001 points): the method of lines converges to the series at second order.

Files:
- data/query_points.csv (id, x, t): the full grid of 81 x (-1 to 1, step 0.025) times 41 t
  (0 to 1, step 0.025), 3321 points, ids 0..3320 in t-major order (id = 81 * i_t + i_x);
- data/observations.csv (x, t, u): 40 measurements at random interior points, x uniform on
  [-0.98, 0.98] and t uniform on [0.01, 0.3] (rounded to 4 decimals), u exact plus N(0, 0.01^2)
  noise (rounded to 5 decimals), sorted by t then x: what a lab measured early on;
- heldout/test_targets.csv (id, u): the exact solution at every query point.

Usage: python make_data.py [OUTPUT_DIR] [--check]   (default: the folder containing this script)
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.special import ive

HERE = Path(__file__).resolve().parent
SEED = 20241007
NU = 0.02
N_X, N_T = 81, 41
X_RANGE, T_RANGE = (-1.0, 1.0), (0.0, 1.0)
N_OBSERVATIONS = 40
OBS_X = (-0.98, 0.98)
OBS_T = (0.01, 0.30)
NOISE = 0.01
MODES = 200


def exact(x, t, nu: float = NU, modes: int = MODES) -> np.ndarray:
    """u(x, t) by Cole-Hopf and the Bessel series of the heat equation (x, t broadcast together)."""
    x, t = np.broadcast_arrays(np.asarray(x, dtype=float), np.asarray(t, dtype=float))
    z = 1.0 / (2.0 * np.pi * nu)
    n = np.arange(1, modes + 1)
    a = (-1.0) ** n * ive(n, z)                       # I_n(z) e^{-z}: the common factor cancels
    decay = np.exp(-nu * (n * np.pi) ** 2 * t[..., None])
    numerator = np.sum(a * n * decay * np.sin(n * np.pi * x[..., None]), axis=-1)
    denominator = ive(0, z) + 2.0 * np.sum(a * decay * np.cos(n * np.pi * x[..., None]), axis=-1)
    return 4.0 * np.pi * nu * numerator / denominator


def query_grid() -> pd.DataFrame:
    xs = np.round(np.linspace(*X_RANGE, N_X), 10)
    ts = np.round(np.linspace(*T_RANGE, N_T), 10)
    t, x = np.meshgrid(ts, xs, indexing="ij")        # t-major: x varies fastest
    return pd.DataFrame({"id": np.arange(N_X * N_T), "x": x.ravel(), "t": t.ravel()})


def targets(query: pd.DataFrame) -> np.ndarray:
    x, t = query["x"].to_numpy(), query["t"].to_numpy()
    u = exact(x, t)
    u = np.where(t == T_RANGE[0], -np.sin(np.pi * x), u)          # the initial condition, exactly
    u = np.where((x == X_RANGE[0]) | (x == X_RANGE[1]), 0.0, u)  # the boundary value, exactly
    return u + 0.0                                                 # no negative zeros


def observations(rng: np.random.Generator) -> pd.DataFrame:
    x = np.round(rng.uniform(*OBS_X, N_OBSERVATIONS), 4)
    t = np.round(rng.uniform(*OBS_T, N_OBSERVATIONS), 4)
    u = np.round(exact(x, t) + NOISE * rng.standard_normal(N_OBSERVATIONS), 5) + 0.0
    return pd.DataFrame({"x": x, "t": t, "u": u}).sort_values(["t", "x"], ignore_index=True)


def write(out_dir: Path) -> None:
    rng = np.random.default_rng(SEED)
    query = query_grid()
    truth = pd.DataFrame({"id": query["id"], "u": targets(query)})
    obs = observations(rng)
    (out_dir / "data").mkdir(parents=True, exist_ok=True)
    (out_dir / "heldout").mkdir(parents=True, exist_ok=True)
    fmt = "%.10g"  # fixed formatting so reruns are byte-identical
    query.to_csv(out_dir / "data" / "query_points.csv", index=False, float_format=fmt)
    obs.to_csv(out_dir / "data" / "observations.csv", index=False, float_format=fmt)
    truth.to_csv(out_dir / "heldout" / "test_targets.csv", index=False, float_format=fmt)


def method_of_lines(points: int, rtol: float = 1e-10, atol: float = 1e-12):
    """pde.py solved by central differences on ``points`` equally spaced x and solve_ivp (BDF):
    (x, t, U) with U[i, j] = u(x_j, t_i) at the query times."""
    from scipy.integrate import solve_ivp
    from scipy.sparse import diags

    spec = importlib.util.spec_from_file_location("burgers_law", HERE / "pde.py")
    law = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(law)
    known = law.KNOWN
    x = np.linspace(*law.DOMAIN, points)
    h = x[1] - x[0]
    ts = np.linspace(*T_RANGE, N_T)

    def f(t, interior):
        left, right = law.boundary(t, **known)
        u = np.concatenate([[left], interior, [right]])
        u_x = (u[2:] - u[:-2]) / (2 * h)
        u_xx = (u[2:] - 2 * interior + u[:-2]) / h ** 2
        return law.rhs(t, x[1:-1], interior, u_x, u_xx, **known)

    m = points - 2
    sparsity = diags([np.ones(m - 1), np.ones(m), np.ones(m - 1)], [-1, 0, 1])
    sol = solve_ivp(f, (law.T0, ts[-1]), law.initial(x[1:-1], **known), t_eval=ts, method="BDF",
                    rtol=rtol, atol=atol, jac_sparsity=sparsity)
    if not sol.success:
        raise RuntimeError(sol.message)
    U = np.zeros((len(ts), points))
    U[:, 1:-1] = sol.y.T
    for i, t in enumerate(ts):
        U[i, 0], U[i, -1] = law.boundary(t, **known)
    return x, ts, U


def check(points_list=(2001, 4001)) -> None:
    """Compare the series with the method of lines on the query grid (the numbers in the docstring)."""
    query = query_grid()
    series = targets(query).reshape(N_T, N_X)
    for points in points_list:
        x, _, U = method_of_lines(points)
        on_query = U[:, np.round((query["x"].to_numpy()[:N_X] - x[0]) / (x[1] - x[0])).astype(int)]
        diff = on_query - series
        print(f"method of lines, {points} points: relative L2 difference "
              f"{np.linalg.norm(diff) / np.linalg.norm(series):.2e}, maximum {np.abs(diff).max():.2e}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out_dir", nargs="?", type=Path, default=HERE)
    parser.add_argument("--check", action="store_true", help="compare with the method of lines; write nothing")
    args = parser.parse_args()
    if args.check:
        check()
    else:
        write(args.out_dir)
