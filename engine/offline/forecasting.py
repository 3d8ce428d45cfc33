"""Forecasting strategies: several series in long format, each forecast from its own history.

A forecast task (answer kind ``series``, engine/assessment/series.py) gives each series'
history as rows of (series, time, value) and asks for the next steps of every series. Rows are
not exchangeable, so these programs bring their own ``main``: they validate on each series'
last ``HORIZON`` steps (the question the official test asks), then refit on the whole history
and forecast. What they share:
- the season is read from the data, never assumed: the lag of the highest autocorrelation of
  the detrended history, taken only when it stands out (``season_length``);
- each series is fitted alone (levels and amplitudes differ between series).
The approaches are the forecaster's usual ladder: persistence, seasonal naive, an
autoregression, and a harmonic regression (trend + seasonal harmonics + AR(1) residual).
"""
from __future__ import annotations

from .strategy import FORECAST, Strategy, make_strategy

_SEASON = '''
def to_model_scale(y, transform):
    """``auto``: a history that is positive throughout is modelled in logs (seasons and spells
    of flows, counts and concentrations multiply); back with ``from_model_scale``."""
    if transform == "auto" and len(y) and np.all(y > 0):
        return np.log(y), True
    return np.asarray(y, dtype=float), False


def from_model_scale(z, logged):
    return np.exp(z) if logged else z


def regular_steps(t):
    """The step of a series' time axis (the median spacing), 1 when it has one row."""
    d = np.diff(np.sort(t))
    d = d[d > 0]
    return float(np.median(d)) if len(d) else 1.0


def season_length(y, lowest=2):
    """The season of a history from its autocorrelation (detrended): past the lags where the
    short memory of the noise holds it up (until it first turns negative), the highest peak,
    taken when it stands out (above 0.2) with at least three cycles in the data; 0: no season."""
    n = len(y)
    if n < 2 * lowest + 2:
        return 0
    t = np.arange(n)
    r = y - np.polyval(np.polyfit(t, y, 1), t)
    r = r - r.mean()
    denom = float(r @ r)
    if denom <= 0:
        return 0
    # three cycles at least: a detrended random walk wanders with "cycles" of a third of its length
    acf = np.array([float(r[lag:] @ r[:-lag]) / denom for lag in range(1, n // 3 + 1)])
    negative = np.flatnonzero(acf < 0)
    if not len(negative):
        return 0  # memory that never fades within the data: no cycle to find
    first = max(int(negative[0]) + 1, lowest)
    if first >= len(acf):
        return 0
    lag = first + int(np.argmax(acf[first - 1:]))
    return lag if acf[lag - 1] > 0.2 else 0
'''

_FORECAST_MAIN = '''
def forecast_series(t_hist, y_hist, t_new):
    """One series: its history (sorted by time) and the times asked for."""
    order = np.argsort(t_hist)
    t_hist, y_hist = t_hist[order], y_hist[order]
    step = regular_steps(t_hist)
    ahead = np.maximum(1, np.round((t_new - t_hist[-1]) / step).astype(int))
    return forecast(y_hist, ahead)


def main():
    start = time.perf_counter()
    train = pd.read_csv(TRAIN_PATH)
    test = pd.read_csv(TEST_PATH)
    print(f"train_rows: {len(train)}  series: {train[SERIES_COLUMN].nunique()}  test_rows: {len(test)}")

    # Validate as the official test asks: each series' last HORIZON steps, fitted on what came before.
    y_true, y_pred = [], []
    for _, hist in train.groupby(SERIES_COLUMN):
        hist = hist.sort_values(TIME_COLUMN)
        if len(hist) <= HORIZON + 3:
            continue
        fit, held = hist.iloc[:-HORIZON], hist.iloc[-HORIZON:]
        y_pred.append(forecast_series(fit[TIME_COLUMN].to_numpy(dtype=float), fit[TARGET].to_numpy(dtype=float),
                                      held[TIME_COLUMN].to_numpy(dtype=float)))
        y_true.append(held[TARGET].to_numpy(dtype=float))
    if y_true:
        report_scores(np.concatenate(y_true), within_bounds(np.concatenate(y_pred)))

    # Then every series' whole history forecasts its test steps; a series never seen gets the overall mean.
    predictions = np.full(len(test), float(train[TARGET].mean()))
    history = {name: hist for name, hist in train.groupby(SERIES_COLUMN)}
    for name, asked in test.groupby(SERIES_COLUMN):
        hist = history.get(name)
        if hist is None or hist.empty:
            continue
        rows = np.flatnonzero(test[SERIES_COLUMN].to_numpy() == name)
        predictions[rows] = forecast_series(hist[TIME_COLUMN].to_numpy(dtype=float),
                                            hist[TARGET].to_numpy(dtype=float),
                                            test[TIME_COLUMN].to_numpy(dtype=float)[rows])
    out = pd.DataFrame({ID_COLUMN: test[ID_COLUMN], TARGET: as_contract(within_bounds(predictions))})
    out.to_csv(PREDICTIONS_FILE, index=False)
    check_predictions(len(test))
    print(f"wrote {len(out)} predictions to {PREDICTIONS_FILE}")
    print(f"elapsed_seconds: {time.perf_counter() - start:.2f}")
'''

FORECASTING: tuple[Strategy, ...] = (
    make_strategy(
        "persistence", "Persistence (last value)", (FORECAST,), "baseline fast interpretable",
        {"window": (1, 4)},
        """
        Each series' forecast is its last value (or the mean of its last few): the floor
        a forecaster must beat, and hard to beat for a random walk.
        """,
        (),
        """
        WINDOW = $window


        def forecast(y_hist, ahead):
            return np.full(len(ahead), float(np.mean(y_hist[-WINDOW:])))
        """, _SEASON, main=_FORECAST_MAIN,
    ),
    make_strategy(
        "seasonal_naive", "Seasonal naive from the autocorrelation", (FORECAST,),
        "baseline fast interpretable",
        {"level": ("none", "recent")},
        """
        Each series repeats its last season: the value one season before each asked step,
        the season being the lag of the highest autocorrelation of the detrended history
        (no clear season: the last value). ``level = recent`` shifts the repeated season
        by how much the last season's mean differs from the one before (a drifting level).
        """,
        (),
        """
        LEVEL = $level


        def forecast(y_hist, ahead):
            period = season_length(y_hist)
            if not period:
                return np.full(len(ahead), float(y_hist[-1]))
            back = y_hist[len(y_hist) - period + (ahead - 1) % period]
            if LEVEL == "recent" and len(y_hist) >= 2 * period:
                back = back + (y_hist[-period:].mean() - y_hist[-2 * period:-period].mean()) * (1 + (ahead - 1) // period)
            return back.astype(float)
        """, _SEASON, main=_FORECAST_MAIN,
    ),
    make_strategy(
        "autoregression", "Autoregression per series", (FORECAST,), "linear regularised fast",
        {"order": (3, 1, 2, 6), "seasonal_difference": (True, False)},
        """
        An AR(p) model per series, fitted by least squares with an intercept and iterated
        forward. With ``seasonal_difference`` (and a season found in the autocorrelation) it
        models the change from one season to the next, which removes the seasonal cycle.
        """,
        (),
        """
        ORDER = $order
        SEASONAL_DIFFERENCE = $seasonal_difference


        def ar_forecast(z, steps):
            p = max(1, min(ORDER, len(z) // 3))
            if len(z) <= p + 2:
                return np.full(steps, float(z[-1]))
            X = np.column_stack([np.ones(len(z) - p)] + [z[p - k - 1:len(z) - k - 1] for k in range(p)])
            coef, *_ = np.linalg.lstsq(X, z[p:], rcond=None)
            history = list(z)
            for _ in range(steps):
                history.append(float(coef[0] + sum(coef[k + 1] * history[-k - 1] for k in range(p))))
            return np.array(history[len(z):])


        def forecast(y_hist, ahead):
            steps = int(ahead.max())
            period = season_length(y_hist) if SEASONAL_DIFFERENCE else 0
            if period and len(y_hist) > 3 * period:
                d = y_hist[period:] - y_hist[:-period]
                dz = ar_forecast(d, steps)
                out = list(y_hist)
                for k in range(steps):
                    out.append(out[-period] + dz[k])
                path = np.array(out[len(y_hist):])
            else:
                path = ar_forecast(y_hist, steps)
            return path[ahead - 1]
        """, _SEASON, main=_FORECAST_MAIN,
    ),
    make_strategy(
        "harmonic_trend", "Harmonic regression with trend and AR(1) residual", (FORECAST,),
        "parametric interpretable smooth extrapolation",
        {"harmonics": (2, 1, 3, 4), "trend": ("linear", "none"), "transform": ("auto", "none")},
        """
        Per series: a level, a linear trend and the first harmonics of the season found in
        the autocorrelation, fitted by least squares (in logs for a positive history); the residual's lag-1 autocorrelation
        carries the last residual forward, decaying step by step. Smooth, interpretable, and
        it extrapolates the season and the trend rather than flattening them.
        """,
        (),
        """
        HARMONICS = $harmonics
        TREND = $trend
        TRANSFORM = $transform


        def design(t, period, scale):
            cols = [np.ones_like(t)]
            if TREND == "linear":
                cols.append(t / scale)
            if period:
                for k in range(1, HARMONICS + 1):
                    cols += [np.cos(2 * np.pi * k * t / period), np.sin(2 * np.pi * k * t / period)]
            return np.column_stack(cols)


        def forecast(y_hist, ahead):
            y_hist, logged = to_model_scale(y_hist, TRANSFORM)
            n = len(y_hist)
            period = season_length(y_hist)
            t = np.arange(n, dtype=float)
            X = design(t, period, max(n, 1))
            ridge = 1e-6 * np.eye(X.shape[1])
            coef = np.linalg.solve(X.T @ X + ridge, X.T @ y_hist)
            resid = y_hist - X @ coef
            phi = float(np.clip(np.corrcoef(resid[1:], resid[:-1])[0, 1], 0.0, 0.99)) if n > 3 else 0.0
            if not np.isfinite(phi):
                phi = 0.0
            t_new = (n - 1 + ahead).astype(float)
            X_new = design(t_new, period, max(n, 1))
            return from_model_scale(X_new @ coef + resid[-1] * phi ** ahead, logged)
        """, _SEASON, main=_FORECAST_MAIN,
    ),
    make_strategy(
        "seasonal_mean", "Seasonal mean with a decaying anomaly", (FORECAST,),
        "interpretable smooth fast nonparametric",
        {"anomaly": ("decay", "none"), "transform": ("auto", "none")},
        """
        Each asked step is the mean of the same phase in every earlier season of its series
        (the season from the autocorrelation; in logs for a positive history), and the last
        step's departure from its own seasonal mean carries forward, shrinking by the
        departures' lag-1 autocorrelation each step: a wet or dry spell fades into the season.
        """,
        (),
        """
        ANOMALY = $anomaly
        TRANSFORM = $transform


        def phase_means(z, period):
            n = len(z)
            return np.array([z[p::period].mean() for p in range(period)]), n


        def forecast(y_hist, ahead):
            z, logged = to_model_scale(y_hist, TRANSFORM)
            period = season_length(z)
            if not period:
                return from_model_scale(np.full(len(ahead), float(z[-20:].mean())), logged)
            means, n = phase_means(z, period)
            fitted = means[np.arange(n) % period]
            departure = z - fitted
            phi = 0.0
            if ANOMALY == "decay" and n > 3:
                phi = float(np.clip(np.corrcoef(departure[1:], departure[:-1])[0, 1], 0.0, 0.99))
                phi = phi if np.isfinite(phi) else 0.0
            steps = n - 1 + ahead
            return from_model_scale(means[steps % period] + departure[-1] * phi ** ahead, logged)
        """, _SEASON, main=_FORECAST_MAIN,
    ),
)
