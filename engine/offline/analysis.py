"""The exploratory-analysis program the offline analyzer runs first: it prints a markdown data
report for the planner.

The report stays bounded whatever the number of columns: per-column tables only up to
MAX_TABLE_ROWS features, summaries (counts, ranges, the top correlations) beyond. It states the
facts a planner needs in plain words: what the target looks like (numbers or class labels),
whether test inputs lie outside the training range, and, for one input, whether the target
jumps. A gap in the sampling is reported as a gap, never as a jump: only a step that is steep
as well as large (a big change between close inputs) counts as evidence of a discontinuity.
"""
from __future__ import annotations

from string import Template
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .strategy import DataSpec

MAX_TABLE_ROWS = 20   # features listed one per row; more are summarised
TOP_CORRELATIONS = 10

_ANALYSIS = Template('''\
"""Exploratory data analysis: prints a markdown report; fits no model."""
import numpy as np
import pandas as pd

TRAIN_PATH = $train_path
TEST_PATH = $test_path
TARGET = $target
FEATURES = $features  # empty: every column of the test file but the id
ID_COLUMN = $id_column
MAX_TABLE_ROWS = $max_rows
TOP = $top


def fmt(value):
    return f"{value:.4g}"


def listing(names, limit=MAX_TABLE_ROWS):
    names = [str(n) for n in names]
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names) - limit} more)" if len(names) > limit else "")


def column_table(frame, columns):
    lines = ["| column | mean | std | min | max | missing |", "|---|---|---|---|---|---|"]
    for col in columns:
        s = pd.to_numeric(frame[col], errors="coerce")
        lines.append(f"| {col} | {fmt(s.mean())} | {fmt(s.std())} | {fmt(s.min())} | "
                     f"{fmt(s.max())} | {int(s.isna().sum())} |")
    return lines


def column_summary(frame, columns):
    # Many columns: what a reader needs is the spread of their properties, not one row each.
    values = frame[columns].apply(pd.to_numeric, errors="coerce")
    std, missing = values.std(), values.isna().sum()
    lines = [f"- {len(columns)} feature columns; minimum over them {fmt(values.min().min())}, "
             f"maximum {fmt(values.max().max())}",
             f"- standard deviations from {fmt(std.min())} ({std.idxmin()}) to {fmt(std.max())} ({std.idxmax()})"]
    with_missing = missing[missing > 0].sort_values(ascending=False)
    lines.append(f"- {len(with_missing)} column(s) with missing values"
                 + (f": {listing([f'{c} ({n})' for c, n in with_missing.items()], 10)}" if len(with_missing) else ""))
    constant = [c for c in columns if values[c].nunique() <= 1]
    if constant:
        lines.append(f"- {len(constant)} constant column(s): {listing(constant, 10)}")
    return lines


def describe(frame, columns):
    return column_table(frame, columns) if len(columns) <= MAX_TABLE_ROWS else column_summary(frame, columns)


def target_report(train):
    y = train[TARGET]
    numeric = pd.to_numeric(y, errors="coerce")
    distinct = y.dropna().unique()
    if numeric.notna().all():
        lines = [f"- numeric, range [{fmt(numeric.min())}, {fmt(numeric.max())}], mean {fmt(numeric.mean())}, "
                 f"std {fmt(numeric.std())}"]
        if (numeric > 0).all():
            lines.append("- all target values are positive")
        if np.allclose(numeric, np.round(numeric)) and len(distinct) <= 20:
            shares = numeric.value_counts(normalize=True).sort_index()
            lines.append(f"- integer-valued target with {len(distinct)} distinct values: "
                         + listing([f"{fmt(v)} ({p:.0%})" for v, p in shares.items()], 20))
        return lines
    shares = y.value_counts(normalize=True)
    return [f"- non-numeric target with {len(distinct)} distinct values (class labels): "
            + listing([f"{v} ({p:.0%})" for v, p in shares.items()], 20)]


def range_report(train, test, features):
    # Test inputs beyond the training range make this an extrapolation problem.
    beyond, spread = [], []
    for col in features:
        a, b = pd.to_numeric(train[col], errors="coerce"), pd.to_numeric(test[col], errors="coerce")
        lo, hi = a.min(), a.max()
        span = (hi - lo) or 1.0
        margin = 0.02 * span
        outside = float(((b < lo - margin) | (b > hi + margin)).mean())
        reach = max(float(b.max() - hi), float(lo - b.min()), 0.0) / span
        # Many test rows outside, or some of them far outside: the test set is elsewhere. A few
        # rows just past the edge are the ordinary spread of two samples of one population.
        if outside >= 0.15 or (outside >= 0.05 and reach >= 0.5):
            beyond.append((outside, reach, col, b.min(), b.max(), lo, hi))
        elif outside > 0:
            spread.append((outside, col))
    lines = []
    if spread:
        spread.sort(reverse=True)
        lines.append(f"- a few test rows lie past the training values of {listing([c for _, c in spread], 5)} "
                     f"(at most {max(spread[0][0], 0.01):.0%} of rows per feature): the ordinary spread of two samples")
    if not beyond:
        return ["- no test input lies outside the training range (beyond the ordinary spread)"] + lines
    beyond.sort(reverse=True)
    spread_lines = lines
    lines = [f"- test inputs outside the training range in {len(beyond)} feature(s); the test set asks "
             "for extrapolation"]
    for outside, reach, col, tmin, tmax, lo, hi in beyond[:5]:
        lines.append(f"  - {col}: {outside:.0%} of test rows outside; test [{fmt(tmin)}, {fmt(tmax)}] vs "
                     f"training [{fmt(lo)}, {fmt(hi)}], reaching {reach:.2f} training spans beyond")
    return lines + spread_lines


def correlation_ranking(train, features):
    numeric = [c for c in features if pd.api.types.is_numeric_dtype(train[c])]
    y = pd.to_numeric(train[TARGET], errors="coerce")
    if not numeric:
        return ["- no numeric feature to correlate"]
    if y.isna().all():
        # Class labels: how much of each feature's variance lies between the classes (eta squared).
        groups = train.groupby(TARGET)
        total = train[numeric].var(ddof=0).replace(0, np.nan)
        between = groups[numeric].mean().sub(train[numeric].mean()).pow(2).mul(groups.size(), axis=0).sum() / len(train)
        eta = (between / total).fillna(0.0).sort_values(ascending=False)
        lines = ["| rank | feature | between-class share of variance |", "|---|---|---|"]
        lines += [f"| {r} | {c} | {eta[c]:.3f} |" for r, c in enumerate(eta.index[:TOP], start=1)]
    else:
        pearson = train[numeric].corrwith(y)
        # Spearman as Pearson on ranks: pandas' method="spearman" would import scipy (slow).
        spearman = train[numeric].rank().corrwith(y.rank())
        order = pearson.abs().sort_values(ascending=False).index
        lines = ["| rank | feature | pearson r | spearman rho |", "|---|---|---|---|"]
        lines += [f"| {r} | {c} | {pearson[c]:+.3f} | {spearman[c]:+.3f} |" for r, c in enumerate(order[:TOP], start=1)]
    if len(numeric) > TOP:
        lines.append(f"({len(numeric) - TOP} weaker features not shown)")
    return lines


def jump_report(train, feature):
    data = train[[feature, TARGET]].apply(pd.to_numeric, errors="coerce").dropna().sort_values(feature)
    x, y = data[feature].to_numpy(), data[TARGET].to_numpy()
    if len(x) < 5:
        return ["- too few samples to look for jumps"]
    dx, dy = np.diff(x), np.abs(np.diff(y))
    typical_dx = float(np.median(dx[dx > 0])) if (dx > 0).any() else 1.0
    typical_dy = float(np.median(dy)) or 1e-12
    slope = dy / np.maximum(dx, 1e-12 * typical_dx)
    typical_slope = float(np.median(slope)) or 1e-12
    lines = []
    # A jump is a large change between close inputs: large in size AND in steepness. A large
    # change across a wide gap in the sampling is what any smooth curve does over a long way.
    steep = np.flatnonzero(slope > 10 * typical_slope)
    i = int(steep[np.argmax(dy[steep])]) if len(steep) else int(np.argmax(dy))
    ratio = dy[i] / typical_dy
    lines.append(f"- largest steep step between neighbouring sorted points: {y[i + 1] - y[i]:+.4g} between "
                 f"{feature} = {x[i]:.5g} and {x[i + 1]:.5g} (midpoint {0.5 * (x[i] + x[i + 1]):.5g}), "
                 f"{ratio:.1f}x the median step")
    if len(steep) and ratio > 10:
        lines.append("- strong evidence of a discontinuity: a single smooth global model will ring "
                     "around it; consider a piecewise fit split at the jump")
    else:
        lines.append("- no dominant jump: the target looks smooth at this sampling density")
    g = int(np.argmax(dx))
    if dx[g] > 5 * typical_dx:
        lines.append(f"- sampling gap: no training samples between {feature} = {x[g]:.5g} and {x[g + 1]:.5g} "
                     f"({dx[g] / typical_dx:.0f}x the median spacing); the target is unobserved there, and a "
                     "gap alone says nothing about its shape")
    rho = pd.Series(x).rank().corr(pd.Series(y).rank())
    if abs(rho) > 0.98:
        lines.append(f"- the target is monotone in {feature} ({'increasing' if rho > 0 else 'decreasing'}, "
                     f"Spearman rho = {rho:+.3f})")
    return lines


def scale_report(train, features):
    numeric = [c for c in features if pd.api.types.is_numeric_dtype(train[c])]
    if len(numeric) < 2:
        return ["- fewer than two numeric features: no scale comparison"]
    stds = train[numeric].std()
    ratio = float(stds.max() / max(stds.min(), 1e-12))
    lines = [f"- feature standard deviations range from {fmt(stds.min())} ({stds.idxmin()}) "
             f"to {fmt(stds.max())} ({stds.idxmax()}), a ratio of {ratio:.1f}"]
    if ratio > 10:
        lines.append("- features are on very different scales: scaling matters for distance, "
                     "kernel, neural and regularised linear models")
    corr = train[numeric].corr().abs().to_numpy(copy=True)
    np.fill_diagonal(corr, 0.0)
    if np.isfinite(corr).any():
        i, j = np.unravel_index(int(np.nanargmax(corr)), corr.shape)
        lines.append(f"- most correlated feature pair: {numeric[i]} / {numeric[j]} (|r| = {corr[i, j]:.2f})"
                     + ("; collinear features favour regularised models" if corr[i, j] > 0.8 else ""))
    return lines


def main():
    train = pd.read_csv(TRAIN_PATH)
    test = pd.read_csv(TEST_PATH)
    features = list(FEATURES) or [c for c in test.columns if c != ID_COLUMN and c in train.columns]
    train_only = [c for c in train.columns if c not in test.columns and c not in (TARGET, ID_COLUMN)]
    report = ["# Exploratory data analysis", "",
              f"- training rows: {len(train)}; test rows: {len(test)}",
              f"- training columns: {listing(train.columns)}",
              f"- test columns: {listing(test.columns)}",
              f"- target: {TARGET}; features: {len(features)}; id column: {ID_COLUMN}"]
    if train_only:
        report.append(f"- only in the training file (cannot be used to predict): {listing(train_only, 10)}")
    report += ["", "## Target", ""] + target_report(train)
    report += ["", "## Training features", ""] + describe(train, features)
    report += ["", "## Test features", ""] + describe(test, features)
    report += ["", "## Correlation with the target", ""] + correlation_ranking(train, features)
    # Structure holds the conclusions later steps rely on (the tree search passes on this section).
    report += ["", "## Structure", ""] + range_report(train, test, features)
    numeric_target = pd.to_numeric(train[TARGET], errors="coerce").notna().all()
    if len(features) == 1 and numeric_target:
        report += jump_report(train, features[0])
    else:
        report += scale_report(train, features)
    print("\\n".join(report))


if __name__ == "__main__":
    main()
''')


_FIELD_ANALYSIS = Template('''"""Exploratory look at a field task: the query grid, the stated law and the observations."""
import os

import numpy as np
import pandas as pd

QUERY_PATH = $query_path
OBSERVATIONS_PATH = $observations_path
LAW_PATH = $law_path
TARGET = $target

query = pd.read_csv(QUERY_PATH)
print("## Data report")
print(f"query points: {len(query)}; columns: {', '.join(query.columns)}")
for column in query.columns[1:]:
    values = np.unique(query[column].to_numpy(dtype=float))
    print(f"- {column}: {len(values)} distinct values from {values.min():.6g} to {values.max():.6g}")
print("no training table: the answer follows from the stated law")
if OBSERVATIONS_PATH and os.path.exists(OBSERVATIONS_PATH):
    seen = pd.read_csv(OBSERVATIONS_PATH)
    print(f"observations: {len(seen)} rows of {', '.join(seen.columns)}")
    print(seen.describe().round(4).to_string())
if LAW_PATH and os.path.exists(LAW_PATH):
    print(f"the law ({LAW_PATH}):")
    print(open(LAW_PATH).read()[:1500])
''')


def render_analysis_script(spec: "DataSpec") -> str:
    """Exploratory-analysis program that prints a bounded markdown report (runs in about 1 s)."""
    if spec.query_path:  # a field: no training table to profile
        return _FIELD_ANALYSIS.substitute(query_path=repr(spec.query_path), observations_path=repr(spec.observations_path),
                                          law_path=repr(spec.law_path), target=repr(spec.target))
    return _ANALYSIS.substitute(
        train_path=repr(spec.train_path), test_path=repr(spec.test_path),
        target=repr(spec.target), features=repr(list(spec.features)),
        id_column=repr(spec.id_column), max_rows=MAX_TABLE_ROWS, top=TOP_CORRELATIONS)
