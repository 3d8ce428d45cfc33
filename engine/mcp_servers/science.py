"""The science MCP server: helpers a research team reaches for, as MCP tools over stdio.

    python -m engine.mcp_servers.science

- ``profile_data``: a bounded summary of a CSV the run may read (rows, columns, types, ranges,
  missing values, the strongest correlations);
- ``fit_curve``: least-squares fit of a named form or a parsed expression, with each
  parameter's standard error from the covariance, R² and the residuals;
- ``convert_units``: unit conversion by pint;
- ``plot``: a plotly chart written as HTML into the output folder, with its sha256.

Every input is hostile (engine/mcp_servers/confine.py, expressions.py): paths stay inside the
allowed roots, sizes are bounded, expressions are parsed, never evaluated. A refused input is a
tool error whose message says why, for the agent to read. The functions are plain Python so
tests call them without a server; ``build_server`` wraps them with the mcp SDK's MCPServer (the
SDK's FastMCP, renamed in mcp 2).
"""
from __future__ import annotations

import functools
import hashlib
import math
from importlib import resources

import numpy as np
import pandas as pd

from .confine import ToolInputError, create, output_file, readable
from .expressions import NAMED, ExpressionError, model_form

MAX_ROWS = 200_000        # rows read from a CSV
MAX_COLUMNS = 200         # columns read from a CSV
SHOWN_COLUMNS = 40        # columns described in a profile
TOP_CORRELATIONS = 10
MAX_POINTS = 20_000       # points a fit or a plot takes
MAX_SERIES = 10
MAX_UNIT_CHARS = 100
MAX_VALUES = 10_000       # values one conversion takes


def _number(x: float) -> float | None:
    """A JSON-safe number: NaN and inf become None."""
    x = float(x)
    return round(x, 10) if math.isfinite(x) else None


def _read_csv(path: str):
    real = readable(path)
    try:
        header = pd.read_csv(real, nrows=0)
        columns = list(header.columns[:MAX_COLUMNS])
        frame = pd.read_csv(real, usecols=columns, nrows=MAX_ROWS)
    except (ValueError, UnicodeDecodeError, pd.errors.ParserError) as exc:
        raise ToolInputError(f"{path!r} is not a readable CSV: {str(exc)[:200]}") from exc
    return frame, len(header.columns)


# --- profile_data --------------------------------------------------------------------------------
def profile_data(path: str) -> dict:
    """Rows, columns, types, ranges, missing values and the strongest correlations of a CSV."""
    frame, total_columns = _read_csv(path)
    columns = []
    for name in list(frame.columns)[:SHOWN_COLUMNS]:
        col = frame[name]
        entry: dict = {"name": str(name)[:100], "missing": int(col.isna().sum())}
        if col.dtype.kind in "iuf":
            values = col.dropna().to_numpy(dtype=float)
            entry.update(type="number", min=_number(values.min()) if values.size else None,
                         max=_number(values.max()) if values.size else None,
                         mean=_number(values.mean()) if values.size else None,
                         std=_number(values.std(ddof=1)) if values.size > 1 else None)
        elif col.dtype.kind == "b":
            entry.update(type="bool", true=int(col.sum()))
        else:
            counts = col.astype(str).value_counts()
            entry.update(type="text", distinct=int(counts.size),
                         most_common=str(counts.index[0])[:100] if counts.size else None)
        columns.append(entry)
    numeric = frame.select_dtypes("number").iloc[:, :SHOWN_COLUMNS]
    pairs = []
    if numeric.shape[1] > 1:
        corr = numeric.corr().to_numpy()
        names = [str(n)[:100] for n in numeric.columns]
        for i in range(len(names)):
            for j in range(i + 1, len(names)):
                if math.isfinite(corr[i, j]):
                    pairs.append({"a": names[i], "b": names[j], "r": round(float(corr[i, j]), 4)})
        pairs.sort(key=lambda p: -abs(p["r"]))
    return {"path": path, "rows": int(len(frame)), "rows_truncated": len(frame) >= MAX_ROWS,
            "columns": total_columns, "columns_shown": len(columns), "column_summaries": columns,
            "missing_total": int(frame.isna().sum().sum()), "strongest_correlations": pairs[:TOP_CORRELATIONS]}


# --- fit_curve -------------------------------------------------------------------------------------
def _points(x, y, path, x_column, y_column) -> tuple[np.ndarray, np.ndarray, str]:
    if path is not None:
        if x_column is None or y_column is None:
            raise ToolInputError("with a path, name x_column and y_column")
        frame, _ = _read_csv(path)
        missing = [c for c in (x_column, y_column) if c not in frame.columns]
        if missing:
            raise ToolInputError(f"{path!r} has no column {missing[0]!r}; it has {', '.join(map(str, frame.columns[:20]))}")
        data = frame[[x_column, y_column]].apply(lambda c: np.asarray(c, dtype=float) if c.dtype.kind in "iufb"
                                                 else np.full(len(c), np.nan)).dropna()
        xs, ys = data[x_column].to_numpy(dtype=float), data[y_column].to_numpy(dtype=float)
        source = f"{path} ({x_column} -> {y_column})"
    else:
        if x is None or y is None:
            raise ToolInputError("give x and y (lists of numbers), or a path with x_column and y_column")
        if len(x) > MAX_POINTS or len(y) > MAX_POINTS:
            raise ToolInputError(f"at most {MAX_POINTS:,} points")
        xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
        if xs.shape != ys.shape:
            raise ToolInputError(f"x has {xs.size} values and y {ys.size}")
        keep = np.isfinite(xs) & np.isfinite(ys)
        xs, ys = xs[keep], ys[keep]
        source = "the given points"
    if xs.size > MAX_POINTS:  # an even thinning keeps the range
        step = math.ceil(xs.size / MAX_POINTS)
        xs, ys = xs[::step], ys[::step]
    return xs, ys, source


def fit_curve(model: str, x: list[float] | None = None, y: list[float] | None = None, path: str | None = None,
              x_column: str | None = None, y_column: str | None = None, p0: list[float] | None = None) -> dict:
    """Least-squares fit of ``model`` (a named form or an expression in x) to the points."""
    from scipy.optimize import curve_fit

    try:
        form = model_form(model)
    except ExpressionError as exc:
        raise ToolInputError(str(exc)) from exc
    xs, ys, source = _points(x, y, path, x_column, y_column)
    k = len(form.parameters)
    if xs.size < k + 2:
        raise ToolInputError(f"{xs.size} finite point(s) cannot fit {k} parameter(s) with an uncertainty; "
                             f"give at least {k + 2}")
    guess = [1.0] * k if p0 is None else [float(v) for v in p0]
    if len(guess) != k:
        raise ToolInputError(f"p0 has {len(guess)} value(s); the model has parameters {', '.join(form.parameters)}")
    try:
        values, cov = curve_fit(form, xs, ys, p0=guess, maxfev=5000)
    except (RuntimeError, ValueError, TypeError) as exc:
        raise ToolInputError(f"the fit of {form.text!r} did not converge: {str(exc)[:200]}; "
                             "try another form or a starting guess p0") from exc
    fitted = form(xs, *values)
    residuals = ys - fitted
    total = float(np.sum((ys - ys.mean()) ** 2))
    errors = np.sqrt(np.diag(cov)) if np.all(np.isfinite(cov)) else np.full(k, np.inf)
    parameters = {name: {"value": _number(v), "stderr": _number(e)} for name, v, e in zip(form.parameters, values, errors)}
    out = {"model": form.text, "source": source, "n": int(xs.size), "dof": int(xs.size - k), "parameters": parameters,
           "r2": _number(1 - float(np.sum(residuals ** 2)) / total) if total > 0 else None,
           "residuals": {"rmse": _number(np.sqrt(np.mean(residuals ** 2))), "mean": _number(residuals.mean()),
                         "max_abs": _number(np.abs(residuals).max())},
           "x_range": [_number(xs.min()), _number(xs.max())]}
    if not np.all(np.isfinite(errors)):
        out["note"] = "some standard errors could not be estimated: the parameters are not all identifiable from these points"
    return out


# --- convert_units ----------------------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def _units():
    import pint

    return pint.UnitRegistry()


def convert_units(value: float | list[float], from_unit: str, to_unit: str) -> dict:
    """``value`` (one number or a list) in ``from_unit``, expressed in ``to_unit``."""
    import pint

    for label, unit in (("from_unit", from_unit), ("to_unit", to_unit)):
        if not isinstance(unit, str) or not unit.strip() or len(unit) > MAX_UNIT_CHARS:
            raise ToolInputError(f"{label} is a unit name of at most {MAX_UNIT_CHARS} characters, e.g. 'km/h'")
    values = value if isinstance(value, list) else [value]
    if len(values) > MAX_VALUES:
        raise ToolInputError(f"at most {MAX_VALUES:,} values")
    ureg = _units()
    try:
        source, target = ureg.Unit(from_unit), ureg.Unit(to_unit)
        converted = ureg.Quantity(np.asarray(values, dtype=float), source).to(target).magnitude
    except pint.errors.DimensionalityError as exc:
        raise ToolInputError(f"cannot convert {from_unit} to {to_unit}: {exc.dim1 or 'dimensionless'} is not "
                             f"{exc.dim2 or 'dimensionless'}") from exc
    except (pint.errors.UndefinedUnitError, pint.errors.DefinitionSyntaxError, AttributeError,
            ValueError, TypeError, SyntaxError) as exc:
        raise ToolInputError(f"unknown unit in {from_unit!r} or {to_unit!r}: {str(exc)[:160]}") from exc
    out = [_number(v) for v in np.atleast_1d(converted)]
    return {"value": out if isinstance(value, list) else out[0], "unit": str(target), "from_unit": str(source)}


# --- plot ---------------------------------------------------------------------------------------------
def plot(x: list[float], y: list[float] | list[list[float]], name: str = "plot", kind: str = "scatter",
         title: str = "", x_label: str = "x", y_label: str = "y", series_names: list[str] | None = None) -> dict:
    """A chart of one or more series over x, written as HTML (plotly) into the output folder."""
    import plotly.graph_objects as go

    if kind not in ("scatter", "line"):
        raise ToolInputError("kind is 'scatter' or 'line'")
    series = y if y and isinstance(y[0], list) else [y]
    if len(series) > MAX_SERIES:
        raise ToolInputError(f"at most {MAX_SERIES} series")
    if len(x) > MAX_POINTS or any(len(s) != len(x) for s in series):
        raise ToolInputError(f"every series has as many values as x (at most {MAX_POINTS:,})")
    labels = [str(s)[:60] for s in (series_names or [])] + [f"series {i + 1}" for i in range(len(series))]
    fig = go.Figure([go.Scatter(x=[float(v) for v in x], y=[float(v) for v in s], name=labels[i],
                                mode="markers" if kind == "scatter" else "lines") for i, s in enumerate(series)])
    fig.update_layout(title=str(title)[:200], xaxis_title=str(x_label)[:100], yaxis_title=str(y_label)[:100])
    target = output_file(name, ".html")
    library = target.parent / "plotly.min.js"   # beside the charts, so they open offline
    if create(library):  # plotly.js as the plotly package ships it
        library.write_bytes((resources.files("plotly") / "package_data" / "plotly.min.js").read_bytes())
    html = fig.to_html(include_plotlyjs=False, full_html=True).replace(
        "<head>", '<head><script src="plotly.min.js"></script>', 1)
    data = html.encode("utf-8")
    with open(target, "wb") as handle:  # created exclusively by output_file
        handle.write(data)
    return {"path": str(target), "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data),
            "series": len(series), "points": len(x)}


TOOLS = (profile_data, fit_curve, convert_units, plot)
DESCRIPTIONS = {
    "profile_data": "Profile a CSV data file of the task: rows, columns, types, ranges, missing values and the "
                    "strongest correlations (a bounded summary). path: a data file of the task, e.g. data/train.csv.",
    "fit_curve": "Fit a curve by least squares and report each parameter with its standard error (from the "
                 "covariance), R² and the residuals. model: one of " + ", ".join(NAMED) + " or an expression in x "
                 "such as 'a*x**b + c'. Data: x and y lists, or a CSV path with x_column and y_column.",
    "convert_units": "Convert a value or a list of values from one unit to another (pint), e.g. 'mile/hour' to "
                     "'m/s', 'degC' to 'K'.",
    "plot": "Plot one or more series over x as an interactive chart (plotly HTML) saved as an artifact of the run; "
            "returns its path and sha256.",
}


def build_server():
    """The MCP server exposing TOOLS; a ToolInputError reaches the agent as the tool's error text."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    server = MCPServer("trellis-science", instructions="Scientific helpers for a Trellis research team.")

    def guarded(fn):
        @functools.wraps(fn)
        def call(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except ToolInputError as exc:
                raise ToolError(str(exc)) from exc
        return call

    for fn in TOOLS:
        server.tool(name=fn.__name__, description=DESCRIPTIONS[fn.__name__])(guarded(fn))
    return server


def main() -> None:
    build_server().run()


if __name__ == "__main__":
    main()


__all__ = ["DESCRIPTIONS", "TOOLS", "build_server", "convert_units", "fit_curve", "plot", "profile_data"]
