"""A data profiler: the kind of tool a lab already has, wrapped as a Trellis agent. It knows
nothing of Trellis: ``run`` takes the inputs its adapter hands it (the task's text) and the
folder holding the task's files, and returns its outputs (a markdown report)."""
from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
from tabulate import tabulate


def _files(task: str, folder: Path) -> list[tuple[str, Path]]:
    named = re.findall(r"^- (\w+): `([^`]+\.csv)`", task, re.M)
    return [(role, folder / rel) for role, rel in named if (folder / rel).is_file()]


def _target(task: str) -> str | None:
    m = re.search(r"^- target column: `([^`]+)`", task, re.M)
    return m.group(1) if m else None


def profile(frame: pd.DataFrame) -> str:
    rows = []
    for name in frame.columns:
        col = frame[name]
        numeric = pd.api.types.is_numeric_dtype(col)
        rows.append([name, str(col.dtype), int(col.isna().sum()),
                     f"{col.min():.4g}" if numeric and col.notna().any() else "-",
                     f"{col.median():.4g}" if numeric and col.notna().any() else "-",
                     f"{col.max():.4g}" if numeric and col.notna().any() else "-",
                     int(col.nunique())])
    return tabulate(rows, headers=["column", "type", "missing", "min", "median", "max", "distinct"], tablefmt="github", disable_numparse=True)


def run(inputs: dict, folder: Path) -> dict:
    task = str(inputs.get("task", ""))
    target = _target(task)
    parts = ["# Data profile (external agent: data-profiler)", ""]
    frames = {}
    for role, path in _files(task, Path(folder)):
        frame = pd.read_csv(path)
        frames[role] = frame
        parts += [f"## {role}: `{path.name}` — {len(frame):,} rows, {frame.shape[1]} columns", "", profile(frame), ""]
    train = frames.get("train")
    if train is not None and target in train.columns:
        numeric = [c for c in train.columns if c != target and pd.api.types.is_numeric_dtype(train[c])]
        if numeric and pd.api.types.is_numeric_dtype(train[target]):
            corr = train[numeric + [target]].corr(method="spearman")[target].drop(target).sort_values(key=abs,
                                                                                                      ascending=False)
            parts += ["## Rank correlation with the target", "",
                      tabulate([[c, f"{v:+.3f}"] for c, v in corr.items()], headers=["feature", f"spearman vs {target}"],
                               tablefmt="github", disable_numparse=True), ""]
        test = next((f for r, f in frames.items() if r.startswith("test")), None)
        if test is not None:
            outside = []
            for c in numeric:
                if c in test.columns:
                    n = int(((test[c] < train[c].min()) | (test[c] > train[c].max())).sum())
                    if n:
                        outside.append([c, n, f"[{train[c].min():.4g}, {train[c].max():.4g}]"])
            parts += ["## Test values outside the training range", "",
                      tabulate(outside, headers=["feature", "test rows outside", "training range"], tablefmt="github", disable_numparse=True)
                      if outside else "none: every test value lies within the training range", ""]
    if not frames:
        parts.append("No CSV file named in the task was found.")
    return {"report": "\n".join(parts).strip() + "\n"}
