"""Reference baseline for burgers-field (not given to agents; see README.md).

A textbook explicit finite-difference scheme for u_t + u u_x = nu u_xx on 41 points (dx = 0.05):
first-order upwind differences for u u_x (backward where u > 0, forward where u < 0), central
differences for u_xx, forward Euler in time with dt = 0.005 (inside both stability limits:
dt (max|u| / dx + 2 nu / dx^2) = 0.18 < 1), u = 0 at both ends. The snapshots are interpolated
linearly in x and t onto the query points. Upwinding adds a numerical viscosity of about
|u| dx / 2 (up to 0.025, more than nu itself), so the shock at x = 0 comes out too wide.
Run in a folder holding data/: reads data/query_points.csv, writes predictions.csv.
"""
import numpy as np
import pandas as pd
from scipy.interpolate import RegularGridInterpolator

NU, DX, DT, T_END = 0.02, 0.05, 0.005, 1.0
x = np.linspace(-1.0, 1.0, 41)
u = -np.sin(np.pi * x)
u[[0, -1]] = 0.0
snapshots = [u.copy()]
for _ in range(round(T_END / DT)):
    ui = u[1:-1]
    backward, forward = (ui - u[:-2]) / DX, (u[2:] - ui) / DX
    u_x = np.where(ui > 0, backward, forward)
    u_xx = (u[2:] - 2 * ui + u[:-2]) / DX ** 2
    u[1:-1] = ui + DT * (-ui * u_x + NU * u_xx)
    snapshots.append(u.copy())
times = DT * np.arange(len(snapshots))
query = pd.read_csv("data/query_points.csv")
field = RegularGridInterpolator((times, x), np.array(snapshots))
query["u"] = field(np.clip(query[["t", "x"]].to_numpy(), [0.0, -1.0], [times[-1], 1.0]))
query[["id", "u"]].to_csv("predictions.csv", index=False)
