"""Fitting the law a task states (answer kind ``parameters``, engine/assessment/parameters.py).

The task gives its law as code in a file the program reads (``answer.law``; README, "The law
file"): ``PARAMETERS = {name: (low, high)}`` and either ``predict(rows, **params)`` (a law in
closed form) or an ODE, ``rhs(t, y, **params)`` with ``initial(row)``, ``STATE``, ``OBSERVED``,
``TIME`` and optionally ``GROUP`` (rows of one experiment share a start) and ``T0``. Or the task
states the law in its text (``dI/dt = beta S I / N - gamma I``, ``I(0) = I0``): the scientist
reads it (engine/assessment/prose_law.py) and writes it into the program as functions; a start the
text does not give is fitted with the parameters, and rows sharing every column but the time
and the target share one run of the law. The program
integrates the ODE with ``scipy.integrate.solve_ivp`` and fits the parameters with
``scipy.optimize.least_squares`` from several seeded starts inside the stated ranges (in logs
for a positive range), so one bad basin does not decide. It validates by reproducing held-out
training rows (whole experiments when the law names a group), refits on every row, and writes
the parameters and the reproduction of the test-features rows.
"""
from __future__ import annotations

from .strategy import PARAMETERS_FAMILY, Strategy, make_strategy

_LAW_MAIN = '''
def load_law(train):
    """The law to fit, one interface whether the task states it in a law file or in its text:
    ``ranges`` of every fitted unknown (the answer's parameters first), and either ``value(rows, p)``
    (a closed form) or an ODE: ``time``, ``group`` columns, ``state``, ``observed``, ``t0``,
    ``initial(row, p)`` and ``rhs(t, y, p, row)``."""
    y_scale = float(np.nanmax(np.abs(train[TARGET].to_numpy(dtype=float)))) if len(train) else 1.0
    if not LAW_PATH:
        if STATED_LAW is None:
            raise SystemExit("the task gives no law file and its text states no law this program can read"
                             + (f" ({STATED_LAW_PROBLEM})" if STATED_LAW_PROBLEM else ""))
        ranges = {n: tuple(PARAMETER_RANGES.get(n, DEFAULT_RANGE)) for n in PARAMETER_NAMES}
        # a start the text does not give is fitted too, between 0 and twice the largest measurement
        ranges.update({f"{s}(0)": (0.0, 2.0 * y_scale + 1e-12) for s in STATED_LAW["unknown_initial"]})
        if "stated_value" in globals():
            return SimpleNamespace(ranges=ranges, value=lambda rows, p: [stated_value(r, p) for r in rows])
        time_col = STATED_LAW["time"]
        # rows that share every other column (the experiment's label and its known starts) share a start
        group = [c for c in train.columns if c not in (TARGET, time_col, ID_COLUMN)]
        return SimpleNamespace(ranges=ranges, value=None, time=time_col, group=group, t0=0.0,
                               state=list(STATED_LAW["state"]), observed=STATED_LAW["observed"],
                               initial=stated_initial, rhs=stated_rhs)
    spec = importlib.util.spec_from_file_location("stated_law", LAW_PATH)
    law = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(law)
    missing = [n for n in PARAMETER_NAMES if n not in getattr(law, "PARAMETERS", {})]
    if missing:
        raise SystemExit(f"{LAW_PATH} gives no range for {missing} in PARAMETERS")
    if not hasattr(law, "predict") and not hasattr(law, "rhs"):
        raise SystemExit(f"{LAW_PATH} defines neither predict(rows, **params) nor rhs(t, y, **params)")
    ranges = {n: tuple(law.PARAMETERS[n]) for n in PARAMETER_NAMES}
    if hasattr(law, "predict"):
        return SimpleNamespace(ranges=ranges, value=lambda rows, p: law.predict(rows, **p))
    group = getattr(law, "GROUP", None)
    return SimpleNamespace(ranges=ranges, value=None, time=getattr(law, "TIME", "t"),
                           group=[group] if isinstance(group, str) else list(group or []),
                           t0=float(getattr(law, "T0", 0.0)), state=list(law.STATE), observed=law.OBSERVED,
                           initial=lambda row, p: law.initial(row), rhs=lambda t, y, p, row: law.rhs(t, y, **p))


def group_keys(frame, columns):
    """One key per row: rows with equal values in ``columns`` share one run of the law."""
    if not columns:
        return np.zeros(len(frame), dtype=int)
    # numbered in order of first appearance; called on every residual of the fit, so no string keys
    return frame.groupby(columns, sort=False, dropna=False).ngroup().to_numpy()


def simulate(law, frame, params):
    """The law's value of the target for each row of ``frame``."""
    rows = frame.to_dict("records")
    if law.value is not None:
        return np.asarray(law.value(rows, params), dtype=float)
    observed = law.state.index(law.observed)
    out = np.full(len(frame), np.nan)
    keys = group_keys(frame, law.group)
    times = frame[law.time].to_numpy(dtype=float)
    for key in pd.unique(keys):
        members = np.flatnonzero(keys == key)
        asked = np.unique(times[members])
        row = rows[members[0]]
        y0 = np.asarray(law.initial(row, params), dtype=float)
        solution = solve_ivp(lambda t, y: law.rhs(t, y, params, row), (law.t0, max(asked.max(), law.t0)), y0,
                             t_eval=asked[asked >= law.t0], method=METHOD, rtol=1e-7, atol=1e-9)
        if not solution.success:
            return np.full(len(frame), np.nan)
        values = dict(zip(solution.t, solution.y[observed]))
        values.setdefault(law.t0, y0[observed])
        out[members] = [values.get(t, np.nan) for t in times[members]]
    return out


def to_params(x, names, logged):
    return {n: float(np.exp(v) if lg else v) for n, v, lg in zip(names, x, logged)}


def fit(law, frame, y):
    names = list(law.ranges)
    low = np.array([law.ranges[n][0] for n in names], dtype=float)
    high = np.array([law.ranges[n][1] for n in names], dtype=float)
    logged = low > 0
    lo, hi = np.where(logged, np.log(np.where(logged, low, 1)), low), np.where(logged, np.log(np.where(logged, high, 1)), high)
    scale = max(float(np.std(y)), 1e-12)

    def residual(x):
        with np.errstate(all="ignore"):
            r = (simulate(law, frame, to_params(x, names, logged)) - y) / scale
        return np.where(np.isfinite(r), r, 1e6)

    rng = np.random.default_rng(SEED)
    best, agreeing = None, 0
    for k in range(STARTS):
        x0 = lo + (hi - lo) * (0.5 if k == 0 else rng.uniform(0.02, 0.98, len(names)))
        try:
            found = least_squares(residual, x0, bounds=(lo, hi), loss=LOSS, x_scale="jac", max_nfev=400)
        except ValueError:
            continue
        if best is not None and abs(found.cost - best.cost) <= 1e-6 * max(best.cost, 1e-12):
            agreeing += 1
        elif best is None or found.cost < best.cost:
            best, agreeing = found, 1
        if agreeing >= 3:  # three starts ended in the same best basin: more starts would find it again
            break
    if best is None:
        raise SystemExit("no start of the fit gave a finite residual")
    return to_params(best.x, names, logged)


def holdout(frame, law):
    """Validation rows: whole experiments when the law's runs have groups, else a random share of rows."""
    rng = np.random.default_rng(SEED)
    keys = group_keys(frame, getattr(law, "group", []))
    groups = pd.unique(keys)
    if len(groups) >= 3:
        chosen = rng.choice(groups, size=max(1, int(round(VALIDATION_FRACTION * len(groups)))), replace=False)
        held = np.isin(keys, chosen)
    else:
        held = np.zeros(len(frame), dtype=bool)
        held[rng.choice(len(frame), size=max(1, int(round(VALIDATION_FRACTION * len(frame)))), replace=False)] = True
    return ~held, held


def main():
    start = time.perf_counter()
    train = pd.read_csv(TRAIN_PATH)
    test = pd.read_csv(TEST_PATH)
    law = load_law(train)
    y = train[TARGET].to_numpy(dtype=float)
    print(f"train_rows: {len(train)}  parameters: {', '.join(PARAMETER_NAMES)}  test_rows: {len(test)}")

    fit_rows, val_rows = holdout(train, law)
    params = fit(law, train[fit_rows].reset_index(drop=True), y[fit_rows])
    report_scores(y[val_rows], within_bounds(simulate(law, train[val_rows].reset_index(drop=True), params)))

    params = fit(law, train, y)
    for name, value in params.items():
        print(f"fitted {name} = {value:.6g}" + ("" if name in PARAMETER_NAMES else "  (not asked for)"))
    answer = {n: params[n] for n in PARAMETER_NAMES}
    pd.DataFrame({"parameter": list(answer), "value": list(answer.values())}).to_csv(PREDICTIONS_FILE, index=False)
    reproduced = as_contract(within_bounds(simulate(law, test, params)))
    pd.DataFrame({ID_COLUMN: test[ID_COLUMN], TARGET: reproduced}).to_csv(REPRODUCTION_FILE, index=False)
    print(f"wrote {len(answer)} parameters to {PREDICTIONS_FILE} and {len(test)} rows to {REPRODUCTION_FILE}")
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
        ("import importlib.util", "import math", "from types import SimpleNamespace", "from scipy.integrate import solve_ivp", "from scipy.optimize import least_squares"),
        """
        STARTS = $starts
        LOSS = $loss
        METHOD = $method
        """, main=_LAW_MAIN,
    ),
)
