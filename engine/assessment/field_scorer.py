"""Run inside the evaluator's sandbox: how well answers satisfy the task's stated equation.

    python trellis_field_scorer.py config.json results.json

``config.json``: the law file, the query points, the id and target columns and ``jobs``: each an
answer file (``id``, target) and, optionally, held-out observations (``space``, ``time``, target).
For each job it writes the residual of the law's equation on the query grid (``rhs`` against
finite differences of the answer: u_t - rhs(t, x, u, u_x, u_xx)), the initial and boundary
conditions' errors and the held-out observations' error; ``value`` adds them, the residual
scaled by the time span (the drift it would cause over the horizon), so every term is in the
target's units. With ``"baselines": true`` it writes the trivial answers instead: the initial
condition held for all times (``initial_held``) and zero everywhere (``zero``).

The law is the task author's code: it runs here, in the sandbox, never in the engine.
"""
import importlib.util
import json
import math
import sys

import numpy as np
import pandas as pd


def id_text(value):
    """An id as evaluate.py reads it: "3", "3.0" and " 3" are one point."""
    text = str(value).strip()
    try:
        number = float(text)
    except ValueError:
        return text
    return str(int(number)) if number.is_integer() else text


def load_law(path):
    spec = importlib.util.spec_from_file_location("stated_law", path)
    law = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(law)
    return law


def grid(query, space, time, ids, values):
    """The answer as a (times, positions) array over the query's tensor grid."""
    xs, ts = np.unique(query[space].to_numpy(float)), np.unique(query[time].to_numpy(float))
    if len(query) != len(xs) * len(ts):
        raise ValueError(f"the query points are not a full grid of {space} x {time} "
                         f"({len(query)} points, {len(xs)} x {len(ts)} distinct values)")
    by_id = dict(zip(ids, values))
    U = np.full((len(ts), len(xs)), np.nan)
    xi = {x: j for j, x in enumerate(xs)}
    ti = {t: i for i, t in enumerate(ts)}
    for qid, x, t in zip(query["__id"], query[space].to_numpy(float), query[time].to_numpy(float)):
        U[ti[t], xi[x]] = by_id.get(qid, np.nan)
    return xs, ts, U


def score(law, known, query, space, time, answer_ids, answer_values, observations, target):
    xs, ts, U = grid(query, space, time, answer_ids, answer_values)
    if not np.all(np.isfinite(U)):
        return {"ok": False, "error": "the answer misses query points or has values that are not finite numbers"}
    T, X = np.meshgrid(ts, xs, indexing="ij")
    u_t = np.gradient(U, ts, axis=0) if len(ts) > 1 else np.zeros_like(U)
    u_x = np.gradient(U, xs, axis=1)
    # the three-point second difference (a gradient of the gradient spans five points and smears
    # a steep front over twice the width, leaving a residual floor no solver can get under)
    u_xx = np.zeros_like(U)
    h0, h1 = np.diff(xs)[:-1], np.diff(xs)[1:]
    u_xx[:, 1:-1] = 2 * (U[:, 2:] * h0 + U[:, :-2] * h1 - U[:, 1:-1] * (h0 + h1)) / (h0 * h1 * (h0 + h1))
    inner = (slice(1, None), slice(1, -1))
    r = u_t[inner] - np.asarray(law.rhs(T[inner], X[inner], U[inner], u_x[inner], u_xx[inner], **known), float)
    residual = float(np.sqrt(np.mean(r ** 2))) if r.size else 0.0
    span = float(ts.max() - ts.min()) or 1.0
    t0 = float(getattr(law, "T0", ts.min()))
    initial = 0.0
    if np.isclose(ts.min(), t0):
        initial = float(np.sqrt(np.mean((U[0] - np.asarray(law.initial(xs, **known), float)) ** 2)))
    lo, hi = getattr(law, "DOMAIN", (xs.min(), xs.max()))
    edges = []
    for i, t in enumerate(ts):
        left, right = law.boundary(float(t), **known)
        if np.isclose(xs[0], lo) and left is not None:
            edges.append(U[i, 0] - float(left))
        if np.isclose(xs[-1], hi) and right is not None:
            edges.append(U[i, -1] - float(right))
    boundary = float(np.sqrt(np.mean(np.square(edges)))) if edges else 0.0
    observed, n_obs = 0.0, 0
    if observations is not None and len(observations):
        from scipy.interpolate import RegularGridInterpolator
        at = RegularGridInterpolator((ts, xs), U, bounds_error=False, fill_value=None)
        pred = at(np.column_stack([observations[time].to_numpy(float), observations[space].to_numpy(float)]))
        observed = float(np.sqrt(np.mean((pred - observations[target].to_numpy(float)) ** 2)))
        n_obs = len(observations)
    value = residual * span + initial + boundary + observed
    if not math.isfinite(value):
        return {"ok": False, "error": f"the answer's residual is {value}: not a finite number"}
    return {"ok": True, "value": value, "residual": residual, "initial": initial, "boundary": boundary,
            "observations": observed, "n_observations": n_obs, "n": int(U.size)}


def main(config_path, results_path):
    config = json.load(open(config_path))
    law = load_law(config["law"])
    known = dict(getattr(law, "KNOWN", {}) or {})
    space, time = getattr(law, "SPACE", "x"), getattr(law, "TIME", "t")
    id_col, target = config["id_column"], config["target"]
    query = pd.read_csv(config["query"])
    query["__id"] = [id_text(v) for v in query[id_col]]
    if config.get("baselines"):
        xs = query[space].to_numpy(float)
        held = np.asarray(law.initial(xs, **known), float)
        for name, values in (("initial_held", held), ("zero", np.zeros(len(query)))):
            pd.DataFrame({id_col: query[id_col], target: values}).to_csv(f"baseline-{name}.csv", index=False)
        json.dump({"ok": True}, open(results_path, "w"))
        return
    results = []
    for job in config["jobs"]:
        try:
            answer = pd.read_csv(job["answer"])
            ids = [id_text(v) for v in answer[id_col]]
            values = pd.to_numeric(answer[target], errors="coerce").to_numpy(float)
            observations = pd.read_csv(job["observations"]) if job.get("observations") else None
            results.append(score(law, known, query, space, time, ids, values, observations, target))
        except Exception as exc:  # one answer's fault is its own result, not the whole validation's
            results.append({"ok": False, "error": f"{type(exc).__name__}: {exc}"})
    json.dump(results, open(results_path, "w"))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
