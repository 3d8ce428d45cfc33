"""A task whose answer is a table of parameters (issue 27 items 2b and 4), on laws nobody tuned
the offline scientist to: logistic growth stated as an ODE, and Michaelis-Menten kinetics stated
in closed form. Each is generated here and run end to end through `python -m engine run`: the
scientist integrates and fits the law the task states and the parameters land near the truth."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]

EVALUATE = '''
import json, sys
from pathlib import Path
import pandas as pd
truth = pd.read_csv(Path(__file__).parent / "heldout" / "true_parameters.csv").set_index("parameter")["value"]
try:
    got = pd.read_csv(sys.argv[1]).set_index("parameter")["value"].astype(float)
    err = [abs(got[n] - truth[n]) / abs(truth[n]) for n in truth.index]
except Exception as exc:
    print(f"malformed parameters: {exc}", file=sys.stderr); sys.exit(2)
print(json.dumps({"metric": "mean_relative_error", "value": sum(err) / len(err), "higher_is_better": False,
                  "n": len(err)}))
'''

LOGISTIC_LAW = '''
PARAMETERS = {"r": (0.01, 5.0), "K": (1.0, 1000.0)}
TIME = "hour"
GROUP = "culture"
STATE = ("N",)
OBSERVED = "N"
T0 = 0.0


def initial(row):
    return [row["N0"]]


def rhs(t, y, r, K):
    return [r * y[0] * (1 - y[0] / K)]
'''

MICHAELIS_LAW = '''
import numpy as np

PARAMETERS = {"vmax": (0.1, 100.0), "km": (0.01, 50.0)}


def predict(rows, vmax, km):
    s = np.array([row["substrate_mM"] for row in rows], dtype=float)
    return vmax * s / (km + s)
'''


def _csv(path: Path, header: list[str], rows: list[list]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join([",".join(header), *(",".join(str(v) for v in r) for r in rows)]) + "\n")


def _task(root: Path, name: str, law: str, truth: dict[str, float], train_header, train, test_header, test,
          target: str) -> Path:
    d = root / name
    _csv(d / "data" / "train.csv", train_header, train)
    _csv(d / "data" / "test_features.csv", test_header, test)
    _csv(d / "heldout" / "true_parameters.csv", ["parameter", "value"], [[k, v] for k, v in truth.items()])
    (d / "law.py").write_text(law)
    (d / "Problem.md").write_text(f"# {name}\n\n## Goal\nEstimate {', '.join(truth)}.\n\n## Context\n"
                                  "The law is stated as code in law.py.\n")
    (d / "Requirements.md").write_text("# Requirements\n\n- CPU only\n")
    (d / "Evaluation.md").write_text("# Evaluation\n\n## Metric\nname: mean_relative_error\n"
                                     "direction: lower is better\n")
    (d / "evaluate.py").write_text(EVALUATE)
    (d / "Data_config.json").write_text(json.dumps({
        "files": {"train": "data/train.csv", "test_features": "data/test_features.csv", "law": "law.py"},
        "target": target, "id_column": "id", "kind": "regression",
        "answer": {"kind": "parameters", "names": list(truth), "law": "law"},
        "predictions": {"file": "parameters.csv", "columns": {"parameter": "str", "value": "float"}}}))
    return d


def logistic_task(root: Path) -> Path:
    rng = np.random.default_rng(11)
    r, K = 0.62, 340.0
    train, test, k = [], [], 0
    for c in range(8):
        n0 = float(rng.uniform(2, 40))
        for hour in np.sort(rng.uniform(0, 18, 9)).round(2):
            n = K / (1 + (K / n0 - 1) * np.exp(-r * hour))
            train.append([f"c{c}", round(n0, 3), hour, round(float(n * (1 + rng.normal(0, 0.03))), 3)])
    for hour in (1.0, 5.0, 12.0):
        test.append([k, "q", 10.0, hour])
        k += 1
    return _task(root, "logistic-growth", LOGISTIC_LAW, {"r": r, "K": K}, ["culture", "N0", "hour", "N"], train,
                 ["id", "culture", "N0", "hour"], test, "N")


def michaelis_task(root: Path) -> Path:
    rng = np.random.default_rng(5)
    vmax, km = 7.3, 1.9
    s = np.sort(rng.uniform(0.05, 20, 40)).round(3)
    v = vmax * s / (km + s) * (1 + rng.normal(0, 0.04, len(s)))
    return _task(root, "enzyme-rate", MICHAELIS_LAW, {"vmax": vmax, "km": km}, ["substrate_mM", "rate"],
                 [[a, round(float(b), 4)] for a, b in zip(s, v)], ["id", "substrate_mM"], [[0, 1.0], [1, 30.0]], "rate")


@pytest.mark.slow
@pytest.mark.parametrize("make", [logistic_task, michaelis_task], ids=["ode", "closed-form"])
def test_the_stated_law_is_fitted_and_its_parameters_handed_in(tmp_path, make):
    task = make(tmp_path)
    done = subprocess.run([sys.executable, "-m", "engine", "run", str(task), "--no-single-agent",
                           "--runs-dir", str(tmp_path / "runs"), "--executor", "subprocess"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "TRELLIS_MCP_CONFIG": "none"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    summary = json.loads(next((tmp_path / "runs").glob("*/summary.json")).read_text())
    assert summary["official"]["ok"] and summary["official"]["metric"] == "mean_relative_error"
    assert summary["official"]["value"] < 0.1  # within 10 % of the truth, from noisy data
    assert "range middle" in done.stdout and "beats every baseline" in done.stdout
    assert "no interval (a table of parameters has no held-out rows to resample)" in done.stdout
