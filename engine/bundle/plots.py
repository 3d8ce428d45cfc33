"""The champion bundle's plots, as PNG files drawn with matplotlib's Agg renderer (no display,
no browser). Each figure is a ``matplotlib.figure.Figure`` of its own, never pyplot's global
state, so plots drawn in two threads of a worker cannot mix.

Each PNG carries its title in its metadata (``Title``), so a reader (or a test) can tell a
held-out (official) plot from a validation one without looking at it.
"""
from __future__ import annotations

import math
from pathlib import Path

from .parts import Pairs

MAX_POINTS = 20000  # points drawn per scatter; every row stays in the CSV beside it
DPI = 110


class PlotsUnavailable(Exception):
    pass


def _figure(width: float = 6.4, height: float = 4.8):
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:  # a bundle without plots still has everything else
        raise PlotsUnavailable("matplotlib is not installed (pip install -r requirements.txt)") from exc
    return Figure(figsize=(width, height), dpi=DPI, layout="constrained")


def _save(fig, path: Path, title: str) -> None:
    fig.savefig(path, format="png", metadata={"Title": title, "Software": "Trellis champion bundle"})


def _thin(n: int) -> list[int]:
    step = max(1, math.ceil(n / MAX_POINTS))
    return list(range(0, n, step))


def _log_if_spread(ax, values: list[float], axis: str = "y") -> None:
    positive = [v for v in values if v > 0]
    if positive and len(positive) == len(values) and max(positive) / min(positive) > 50:
        (ax.set_yscale if axis == "y" else ax.set_xscale)("log")


def prediction_vs_truth(pairs: Pairs, path: Path, metric_line: str) -> str:
    """A scatter of prediction against truth with the identity line (regression), or the
    confusion matrix (classification). Returns the figure's title."""
    fig = _figure()
    ax = fig.subplots()
    nums = pairs.numeric()
    title = f"Prediction vs truth: {pairs.label}"
    if nums is None:
        _confusion(ax, pairs)
        title = f"Confusion matrix: {pairs.label}"
    else:
        truth, pred = nums
        keep = _thin(len(truth))
        folds = sorted(set(pairs.fold))
        if len(folds) > 1:
            for f in folds:
                idx = [i for i in keep if pairs.fold[i] == f]
                ax.scatter([truth[i] for i in idx], [pred[i] for i in idx], s=10, alpha=0.7, label=f"fold {f}")
            ax.legend(fontsize=7, loc="upper left")
        else:
            ax.scatter([truth[i] for i in keep], [pred[i] for i in keep], s=10, alpha=0.7)
        lo, hi = min(truth + pred), max(truth + pred)
        ax.plot([lo, hi], [lo, hi], color="black", linewidth=1, linestyle="--")
        ax.set_xlabel("truth")
        ax.set_ylabel("prediction")
    ax.set_title(f"{title}\n{metric_line} · n = {len(pairs.ids)}", fontsize=9)
    _save(fig, path, title)
    return title


def _confusion(ax, pairs: Pairs) -> None:
    labels = sorted(set(pairs.truth) | set(pairs.prediction))[:50]
    index = {label: i for i, label in enumerate(labels)}
    counts = [[0] * len(labels) for _ in labels]
    for t, p in zip(pairs.truth, pairs.prediction):
        if t in index and p in index:
            counts[index[t]][index[p]] += 1
    ax.imshow(counts, cmap="Blues")
    for i, row in enumerate(counts):
        for j, c in enumerate(row):
            if c:
                ax.text(j, i, str(c), ha="center", va="center", fontsize=8)
    ax.set_xticks(range(len(labels)), labels, fontsize=7)
    ax.set_yticks(range(len(labels)), labels, fontsize=7)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")


def _inputs(pairs: Pairs) -> list[list[float]] | None:
    """The plotted inputs as numbers, one list per input; None when any is not a number."""
    if not pairs.features:
        return None
    try:
        return [[float(row[i]) for row in pairs.x] for i in range(len(pairs.features))]
    except (ValueError, IndexError):
        return None


def residuals(pairs: Pairs, path: Path) -> str:
    """Residuals (prediction - truth) against the task's one input, as a map over its two
    inputs, or against the truth when it has more; with their histogram beside. Only for
    numbers: raises ValueError otherwise."""
    nums = pairs.numeric()
    if nums is None:
        raise ValueError("residuals need numeric targets; this task's are labels (see the confusion matrix)")
    truth, pred = nums
    res = [p - t for t, p in zip(truth, pred)]
    inputs = _inputs(pairs)
    fig = _figure(9.0, 4.0)
    left, right = fig.subplots(1, 2, width_ratios=[2, 1])
    keep = _thin(len(res))
    if inputs is not None and len(inputs) == 2:
        # a field over two inputs (space and time, say): where the errors lie shows as a map
        span = max(abs(r) for r in res) or 1.0
        dots = left.scatter([inputs[0][i] for i in keep], [inputs[1][i] for i in keep], c=[res[i] for i in keep],
                            s=10, cmap="coolwarm", vmin=-span, vmax=span)
        fig.colorbar(dots, ax=left, label="residual (prediction - truth)")
        left.set_xlabel(pairs.features[0])
        left.set_ylabel(pairs.features[1])
    else:
        x, xlabel = (inputs[0], pairs.features[0]) if inputs is not None else (truth, "truth")
        left.scatter([x[i] for i in keep], [res[i] for i in keep], s=8, alpha=0.7)
        left.axhline(0.0, color="black", linewidth=1, linestyle="--")
        left.set_xlabel(xlabel)
        left.set_ylabel("residual (prediction - truth)")
    right.hist(res, bins=min(50, max(5, int(math.sqrt(len(res))))))
    right.set_xlabel("residual")
    right.set_ylabel("rows")
    title = f"Residuals: {pairs.label}"
    rms = math.sqrt(sum(r * r for r in res) / len(res))
    fig.suptitle(f"{title} · n = {len(res)} · RMS {rms:.4g} · max |r| {max(abs(r) for r in res):.4g}", fontsize=9)
    _save(fig, path, title)
    return title


def training_curves(points: list[dict], path: Path, job: str) -> str:
    """Loss and validation loss by epoch (or by seconds when the program reported no epochs),
    and the learning rate beneath when it was reported."""
    points = [p for p in points if isinstance(p, dict)]
    has_lr = any("lr" in p for p in points)
    fig = _figure(6.4, 6.0 if has_lr else 4.4)
    axes = fig.subplots(2, 1, sharex=True, height_ratios=[3, 1]) if has_lr else [fig.subplots()]
    by_epoch = all(p.get("epoch") is not None for p in points)
    x_of = (lambda p: p["epoch"]) if by_epoch else (lambda p: p.get("t", 0.0))
    drawn: list[float] = []
    for name, label in (("loss", "training loss"), ("val", "validation")):
        pts = [(x_of(p), p[name]) for p in points if isinstance(p.get(name), (int, float))]
        if pts:
            axes[0].plot([a for a, _ in pts], [b for _, b in pts], marker="o", markersize=2.5, label=label)
            drawn += [b for _, b in pts]
    _log_if_spread(axes[0], drawn)
    axes[0].set_ylabel("loss")
    axes[0].legend(fontsize=8)
    if has_lr:
        pts = [(x_of(p), p["lr"]) for p in points if isinstance(p.get("lr"), (int, float))]
        axes[1].plot([a for a, _ in pts], [b for _, b in pts], color="gray")
        axes[1].set_ylabel("learning rate")
    axes[-1].set_xlabel("epoch" if by_epoch else "seconds")
    title = "Training curves of the champion's job"
    axes[0].set_title(f"{title} {job}", fontsize=9)
    _save(fig, path, title)
    return title


def search_progress(nodes: list[dict], champion: str, path: Path, metric: str, higher_is_better: bool) -> str:
    """Every scored node's validation score by iteration, the best so far, the champion's lineage."""
    fig = _figure()
    ax = fig.subplots()
    scored = [n for n in nodes if n.get("score") is not None and math.isfinite(n["score"])]
    by_id = {n["id"]: n for n in nodes}
    plausible = [n for n in scored if not n.get("failed_checks") and not n.get("vetoed")]
    others = [n for n in scored if n not in plausible]
    ax.scatter([n["iteration"] for n in plausible], [n["score"] for n in plausible], s=18, label="node")
    if others:
        ax.scatter([n["iteration"] for n in others], [n["score"] for n in others], s=18, marker="x",
                   color="gray", label="vetoed or failing a check")
    iterations = sorted({n["iteration"] for n in scored})
    best, line = None, []
    for it in iterations:
        for n in plausible:
            if n["iteration"] == it and (best is None or (n["score"] > best if higher_is_better else n["score"] < best)):
                best = n["score"]
        line.append(best)
    ax.step(iterations, line, where="post", color="black", linewidth=1, label="best so far")
    lineage, node = [], by_id.get(champion)
    while node is not None:
        lineage.append(node)
        node = by_id.get(node.get("parent"))
    lineage = [n for n in reversed(lineage) if n.get("score") is not None]
    ax.plot([n["iteration"] for n in lineage], [n["score"] for n in lineage], color="tab:red", linewidth=1.5,
            marker="*", markersize=9, label=f"champion {champion} and its lineage")
    _log_if_spread(ax, [n["score"] for n in scored])
    ax.set_xticks(range(min(iterations, default=0), max(iterations, default=0) + 1))
    ax.set_xlabel("iteration")
    ax.set_ylabel(f"validation {metric} ({'higher' if higher_is_better else 'lower'} is better)")
    ax.legend(fontsize=7)
    title = "Tree search: node scores by iteration"
    ax.set_title(title, fontsize=9)
    _save(fig, path, title)
    return title
