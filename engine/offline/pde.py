"""Solving the PDE a task states (answer kind ``field``, engine/assessment/field.py).

The task gives the equation as code (README, "The field's law file"): u_t = rhs(t, x, u, u_x,
u_xx) on DOMAIN with initial(x) at T0, Dirichlet boundary(t) values and constants KNOWN. The
program solves it by the method of lines: a fine grid over the domain (the query's own positions
included, so no interpolation in space where it is asked), second-order central differences in
space, and scipy's ``solve_ivp`` in time (an implicit method by default: diffusion makes the
system stiff). It then reads u off at every query point, checks its own residual on the query
grid the way Trellis will (the number it prints), and, where the task gives observations,
reports how far the solution is from them.
"""
from __future__ import annotations

from .strategy import FIELD_FAMILY, Strategy, make_strategy

_PDE_MAIN = '''
def load_law():
    spec = importlib.util.spec_from_file_location("stated_law", LAW_PATH)
    law = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(law)
    missing = [n for n in ("initial", "boundary", "rhs", "DOMAIN") if not hasattr(law, n)]
    if missing:
        raise SystemExit(f"{LAW_PATH} lacks {missing}: the method of lines needs them")
    return law


def solve(law, xs_asked, ts_asked):
    """u on (ts_asked, fine grid), the fine grid holding every asked position."""
    known = dict(getattr(law, "KNOWN", {}) or {})
    lo, hi = (float(v) for v in law.DOMAIN)
    x = np.union1d(np.linspace(lo, hi, POINTS), np.clip(xs_asked, lo, hi))
    # a position read from a CSV may differ from the grid's own by the last bit: two points 1e-17
    # apart would make the system impossibly stiff, so near-duplicates go (the asked one is kept)
    keep = np.concatenate([[True], np.diff(x) > 1e-9 * (hi - lo)])
    x = x[keep]
    t0 = float(getattr(law, "T0", 0.0))
    h_left, h_right = np.diff(x)[:-1], np.diff(x)[1:]

    def derivatives(u_full):
        # second-order central differences on a non-uniform grid, interior points
        um, u0, up = u_full[:-2], u_full[1:-1], u_full[2:]
        u_x = (up * h_left ** 2 - um * h_right ** 2 + u0 * (h_right ** 2 - h_left ** 2)) / (h_left * h_right * (h_left + h_right))
        u_xx = 2 * (up * h_left + um * h_right - u0 * (h_left + h_right)) / (h_left * h_right * (h_left + h_right))
        return u_x, u_xx

    def full(t, interior):
        left, right = law.boundary(t, **known)
        return np.concatenate([[float(left)], interior, [float(right)]])

    def f(t, interior):
        u_full = full(t, interior)
        u_x, u_xx = derivatives(u_full)
        return np.asarray(law.rhs(t, x[1:-1], interior, u_x, u_xx, **known), dtype=float)

    u0 = np.asarray(law.initial(x, **known), dtype=float)
    times = np.unique(np.concatenate([[t0], ts_asked[ts_asked >= t0]]))
    solution = solve_ivp(f, (t0, float(times.max())), u0[1:-1], t_eval=times, method=METHOD, rtol=1e-6, atol=1e-8)
    if not solution.success:
        raise SystemExit(f"the solver stopped: {solution.message}")
    U = np.array([full(t, solution.y[:, k]) for k, t in enumerate(solution.t)])
    return x, solution.t, U


def residual_on(xs, ts, U, law):
    """The stated equation's residual on a (times, positions) grid, as Trellis measures it."""
    known = dict(getattr(law, "KNOWN", {}) or {})
    T, X = np.meshgrid(ts, xs, indexing="ij")
    u_t = np.gradient(U, ts, axis=0)
    u_x = np.gradient(U, xs, axis=1)
    u_xx = np.zeros_like(U)
    h0, h1 = np.diff(xs)[:-1], np.diff(xs)[1:]
    u_xx[:, 1:-1] = 2 * (U[:, 2:] * h0 + U[:, :-2] * h1 - U[:, 1:-1] * (h0 + h1)) / (h0 * h1 * (h0 + h1))
    inner = (slice(1, None), slice(1, -1))
    r = u_t[inner] - np.asarray(law.rhs(T[inner], X[inner], U[inner], u_x[inner], u_xx[inner], **known))
    return float(np.sqrt(np.mean(r ** 2))) if r.size else 0.0


def main():
    start = time.perf_counter()
    law = load_law()
    space, time_col = getattr(law, "SPACE", "x"), getattr(law, "TIME", "t")
    query = pd.read_csv(QUERY_PATH)
    qx, qt = query[space].to_numpy(dtype=float), query[time_col].to_numpy(dtype=float)
    xs_asked, ts_asked = np.unique(qx), np.unique(qt)
    print(f"query_points: {len(query)}  grid: {len(xs_asked)} x {len(ts_asked)}  solver points: {POINTS}  method: {METHOD}")
    x, t, U = solve(law, xs_asked, ts_asked)
    at_t = {float(v): k for k, v in enumerate(t)}
    values = np.array([np.interp(xq, x, U[at_t[float(tq)]]) for xq, tq in zip(qx, qt)])
    field = pd.DataFrame({ID_COLUMN: query[ID_COLUMN], TARGET: values})
    grid = field.assign(_x=qx, _t=qt).pivot_table(index="_t", columns="_x", values=TARGET).to_numpy()
    print(f"validation_law_residual: {residual_on(xs_asked, ts_asked, grid, law):.6g}")
    if OBSERVATIONS_PATH and os.path.exists(OBSERVATIONS_PATH):
        seen = pd.read_csv(OBSERVATIONS_PATH)
        if len(seen):
            from scipy.interpolate import RegularGridInterpolator
            at = RegularGridInterpolator((t, x), U, bounds_error=False, fill_value=None)
            pred = at(np.column_stack([seen[time_col].to_numpy(dtype=float), seen[space].to_numpy(dtype=float)]))
            print(f"observations_rmse: {float(np.sqrt(np.mean((pred - seen[TARGET].to_numpy(dtype=float)) ** 2))):.6g}")
    field[TARGET] = as_contract(within_bounds(field[TARGET].to_numpy()))
    field.to_csv(PREDICTIONS_FILE, index=False)
    print(f"wrote {len(field)} values of {TARGET} to {PREDICTIONS_FILE}")
    print(f"elapsed_seconds: {time.perf_counter() - start:.2f}")
'''

PDE_SOLVERS: tuple[Strategy, ...] = (
    make_strategy(
        "method_of_lines", "The stated PDE solved by the method of lines", (FIELD_FAMILY,),
        "physics parametric interpretable extrapolation",
        {"points": (401, 201, 801), "method": ("BDF", "Radau", "LSODA", "RK45")},
        """
        The equation the task states (its law file), discretised in space by central
        differences on a fine grid holding every asked position, integrated in time with
        solve_ivp from the initial condition with the stated boundary values; u is read off at
        every query point.
        """,
        ("import importlib.util", "from scipy.integrate import solve_ivp"),
        """
        POINTS = $points
        METHOD = $method
        """, main=_PDE_MAIN,
    ),
)
