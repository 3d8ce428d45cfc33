"""Fitting the law a task states (answer kind ``parameters``, engine/assessment/parameters.py).

The task gives its law as code in a file the program reads (``answer.law``; README, "The law
file"): ``PARAMETERS = {name: (low, high)}`` and either ``predict(rows, **params)`` (a law in
closed form) or an ODE, ``rhs(t, y, **params)`` with ``initial(row)``, ``STATE``, ``OBSERVED``,
``TIME`` and optionally ``GROUP`` (rows of one experiment share a start) and ``T0``. The program
integrates the ODE with ``scipy.integrate.solve_ivp`` and fits the parameters with
``scipy.optimize.least_squares`` from several seeded starts inside the stated ranges (in logs
for a positive range), so one bad basin does not decide. It validates by reproducing held-out
training rows (whole experiments when the law names a group), refits on every row, and writes
the parameters and the reproduction of the test-features rows.
"""
from __future__ import annotations

from .strategies import PARAMETERS_FAMILY, Strategy, make_strategy

_LAW_MAIN = '''
def load_law():
    spec = importlib.util.spec_from_file_location("stated_law", LAW_PATH)
    law = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(law)
    missing = [n for n in PARAMETER_NAMES if n not in getattr(law, "PARAMETERS", {})]
    if missing:
        raise SystemExit(f"{LAW_PATH} gives no range for {missing} in PARAMETERS")
    if not hasattr(law, "predict") and not hasattr(law, "rhs"):
        raise SystemExit(f"{LAW_PATH} defines neither predict(rows, **params) nor rhs(t, y, **params)")
    return law


def simulate(law, frame, params):
    """The law's value of the target for each row of ``frame``."""
    rows = frame.to_dict("records")
    if hasattr(law, "predict"):
        return np.asarray(law.predict(rows, **params), dtype=float)
    time_col = getattr(law, "TIME", "t")
    group_col = getattr(law, "GROUP", None)
    observed = list(law.STATE).index(law.OBSERVED)
    t0 = float(getattr(law, "T0", 0.0))
    out = np.full(len(frame), np.nan)
    keys = frame[group_col].to_numpy() if group_col else np.zeros(len(frame))
    times = frame[time_col].to_numpy(dtype=float)
    for key in pd.unique(keys):
        members = np.flatnonzero(keys == key)
        asked = np.unique(times[members])
        y0 = np.asarray(law.initial(rows[members[0]]), dtype=float)
        solution = solve_ivp(lambda t, y: law.rhs(t, y, **params), (t0, max(asked.max(), t0)), y0,
                             t_eval=asked[asked >= t0], method=METHOD, rtol=1e-7, atol=1e-9)
        if not solution.success:
            return np.full(len(frame), np.nan)
        values = dict(zip(solution.t, solution.y[observed]))
        values.setdefault(t0, y0[observed])
        out[members] = [values.get(t, np.nan) for t in times[members]]
    return out


def to_params(x, names, logged):
    return {n: float(np.exp(v) if lg else v) for n, v, lg in zip(names, x, logged)}


def fit(law, frame, y):
    names = list(PARAMETER_NAMES)
    low = np.array([law.PARAMETERS[n][0] for n in names], dtype=float)
    high = np.array([law.PARAMETERS[n][1] for n in names], dtype=float)
    logged = low > 0
    lo, hi = np.where(logged, np.log(np.where(logged, low, 1)), low), np.where(logged, np.log(np.where(logged, high, 1)), high)
    scale = max(float(np.std(y)), 1e-12)

    def residual(x):
        r = (simulate(law, frame, to_params(x, names, logged)) - y) / scale
        return np.where(np.isfinite(r), r, 1e6)

    rng = np.random.default_rng(SEED)
    best = None
    for k in range(STARTS):
        x0 = lo + (hi - lo) * (0.5 if k == 0 else rng.uniform(0.02, 0.98, len(names)))
        try:
            found = least_squares(residual, x0, bounds=(lo, hi), loss=LOSS, x_scale="jac", max_nfev=400)
        except ValueError:
            continue
        if best is None or found.cost < best.cost:
            best = found
    if best is None:
        raise SystemExit("no start of the fit gave a finite residual")
    return to_params(best.x, names, logged)


def holdout(frame, law):
    """Validation rows: whole experiments when the law names a group, else a random share of rows."""
    rng = np.random.default_rng(SEED)
    group_col = getattr(law, "GROUP", None)
    if group_col and frame[group_col].nunique() >= 3:
        groups = pd.unique(frame[group_col])
        chosen = rng.choice(groups, size=max(1, int(round(VALIDATION_FRACTION * len(groups)))), replace=False)
        held = frame[group_col].isin(chosen).to_numpy()
    else:
        held = np.zeros(len(frame), dtype=bool)
        held[rng.choice(len(frame), size=max(1, int(round(VALIDATION_FRACTION * len(frame)))), replace=False)] = True
    return ~held, held


def main():
    start = time.perf_counter()
    law = load_law()
    train = pd.read_csv(TRAIN_PATH)
    test = pd.read_csv(TEST_PATH)
    y = train[TARGET].to_numpy(dtype=float)
    print(f"train_rows: {len(train)}  parameters: {', '.join(PARAMETER_NAMES)}  test_rows: {len(test)}")

    fit_rows, val_rows = holdout(train, law)
    params = fit(law, train[fit_rows].reset_index(drop=True), y[fit_rows])
    report_scores(y[val_rows], within_bounds(simulate(law, train[val_rows].reset_index(drop=True), params)))

    params = fit(law, train, y)
    for name, value in params.items():
        print(f"fitted {name} = {value:.6g}")
    pd.DataFrame({"parameter": list(params), "value": list(params.values())}).to_csv(PREDICTIONS_FILE, index=False)
    reproduced = as_contract(within_bounds(simulate(law, test, params)))
    pd.DataFrame({ID_COLUMN: test[ID_COLUMN], TARGET: reproduced}).to_csv(REPRODUCTION_FILE, index=False)
    print(f"wrote {len(params)} parameters to {PREDICTIONS_FILE} and {len(test)} rows to {REPRODUCTION_FILE}")
    print(f"elapsed_seconds: {time.perf_counter() - start:.2f}")
'''

LAW_FITS: tuple[Strategy, ...] = (
    make_strategy(
        "law_fit", "The stated law fitted by least squares", (PARAMETERS_FAMILY,),
        "physics parametric interpretable extrapolation",
        {"starts": (8, 16, 4), "loss": ("linear", "soft_l1"), "method": ("LSODA", "RK45", "Radau")},
        """
        The law the task states (its law file), integrated with solve_ivp where it is an ODE,
        its parameters fitted by least squares from several starts inside their stated
        ranges; the answer is the fitted parameters, and the law with them reproduces rows.
        """,
        ("import importlib.util", "from scipy.integrate import solve_ivp", "from scipy.optimize import least_squares"),
        """
        STARTS = $starts
        LOSS = $loss
        METHOD = $method
        """, main=_LAW_MAIN,
    ),
)
