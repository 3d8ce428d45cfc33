"""The offline scientist forecasts a series task it was never tuned on (issue 27 item 4): a
generated task unlike the shipped river-flow example (an additive 7-step cycle around zero, so
no logs; another horizon; another metric), run end to end through `python -m engine run`."""
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]

EVALUATE = '''
import argparse, json, sys
from pathlib import Path
import pandas as pd
p = argparse.ArgumentParser(); p.add_argument("predictions")
p.add_argument("--truth", default=str(Path(__file__).parent / "heldout" / "test_targets.csv"))
a = p.parse_args()
t, q = pd.read_csv(a.truth), pd.read_csv(a.predictions)
if "sensor" not in t.columns:
    print("the truth needs the sensor column", file=sys.stderr); sys.exit(2)
m = t.merge(q, on="id", suffixes=("", "_p"))
if len(m) != len(t) or m["load_p"].isna().any():
    print("ids do not match", file=sys.stderr); sys.exit(2)
per = (m["load"] - m["load_p"]).abs().groupby(m["sensor"]).mean()
print(json.dumps({"metric": "mean_series_mae", "value": float(per.mean()), "higher_is_better": False, "n": len(m)}))
'''


def _csv(path: Path, header: list[str], rows: list[list]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join([",".join(header), *(",".join(str(v) for v in r) for r in rows)]) + "\n")


def weekly_load_task(root: Path, seed: int = 3, horizon: int = 5) -> Path:
    """Five sensors, each a 7-step cycle of its own shape and size around zero plus AR(1) noise."""
    rng = np.random.default_rng(seed)
    d = root / "weekly-load"
    train, test, truth, k = [], [], [], 0
    for s in range(5):
        n = int(rng.integers(90, 140))
        shape = rng.normal(0, 1, 7) * rng.uniform(2, 6)
        noise = np.zeros(n + horizon)
        for t in range(1, n + horizon):
            noise[t] = 0.5 * noise[t - 1] + rng.normal(0, 0.6)
        y = shape[np.arange(n + horizon) % 7] + noise
        train += [[f"s{s}", t, round(float(y[t]), 4)] for t in range(n)]
        for t in range(n, n + horizon):
            test.append([k, f"s{s}", t])
            truth.append([k, round(float(y[t]), 4), f"s{s}", t])
            k += 1
    _csv(d / "data" / "train.csv", ["sensor", "step", "load"], train)
    _csv(d / "data" / "test_features.csv", ["id", "sensor", "step"], test)
    _csv(d / "heldout" / "test_targets.csv", ["id", "load", "sensor", "step"], truth)
    (d / "Problem.md").write_text("# Sensor load\n\n## Goal\nForecast each sensor's next readings.\n\n"
                                  "## Context\nLoads are deviations from a nominal value, so they are often negative.\n")
    (d / "Requirements.md").write_text("# Requirements\n\n- CPU only\n")
    (d / "Evaluation.md").write_text("# Evaluation\n\n## Metric\nname: mean_series_mae\ndirection: lower is better\n\n"
                                     "`python evaluate.py predictions.csv --truth truth.csv` scores a fold.\n")
    (d / "evaluate.py").write_text(EVALUATE)
    (d / "Data_config.json").write_text(json.dumps({
        "files": {"train": "data/train.csv", "test_features": "data/test_features.csv"}, "target": "load",
        "id_column": "id", "kind": "regression",
        "answer": {"kind": "series", "series": "sensor", "time": "step", "horizon": horizon},
        "predictions": {"file": "predictions.csv", "columns": {"id": "int", "load": "float"}}}))
    return d


def test_the_season_is_read_from_the_autocorrelation_of_each_series():
    from engine.offline import forecasting

    namespace = {"np": np}
    exec(forecasting._SEASON, namespace)
    rng = np.random.default_rng(0)
    for period in (7, 12, 24):
        shape = rng.normal(0, 3, period)
        noise = np.zeros(10 * period)
        for t in range(1, len(noise)):
            noise[t] = 0.8 * noise[t - 1] + rng.normal(0, 0.5)
        y = shape[np.arange(len(noise)) % period] + noise
        assert namespace["season_length"](y) == period
    walk = np.cumsum(rng.normal(0, 1, 300))
    assert namespace["season_length"](walk) == 0  # a random walk has no season to find


@pytest.mark.slow
def test_a_forecast_task_nobody_tuned_for_is_run_end_to_end_and_beats_persistence(tmp_path):
    task = weekly_load_task(tmp_path)
    done = subprocess.run([sys.executable, "-m", "engine", "run", str(task), "--no-single-agent",
                           "--runs-dir", str(tmp_path / "runs"), "--executor", "subprocess"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**__import__("os").environ, "TRELLIS_MCP_CONFIG": "none"})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    summary = json.loads(next((tmp_path / "runs").glob("*/summary.json")).read_text())
    team = summary["official"]["value"]
    from engine.official import official_baselines
    from engine.task import load_task

    baselines = {name: b["value"] for name, b in official_baselines(load_task(task)).items() if b.get("ok")}
    assert "persistence" in done.stdout and "beats every baseline" in done.stdout
    # the official lead's interval: each resample's truth carries the sensor column the metric needs
    assert re.search(r"lead over persistence: [+-][\d.]+, 95 % \[", done.stdout), done.stdout[-1500:]
    assert set(baselines) == {"persistence", "series_mean"}
    assert math.isfinite(team) and team < min(baselines.values())
