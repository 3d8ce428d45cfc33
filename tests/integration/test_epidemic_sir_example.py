"""The epidemic-sir example (answer kind 'parameters', the law stated in Problem.md's text only):
the task loads with its ranges and no law file, the data follow the documented SIR model, the
offline scientist reads the law from the task's description and its program recovers beta and
gamma far better than the hand-written baseline, which itself beats the engine's trivial
baseline. make_data.py reproduces the committed files."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.integrate import solve_ivp

from engine.offline.law_fit import LAW_FITS
from engine.offline.strategy import spec_of_task
from engine.task import load_task

from tests.example_files import assert_make_data_reproduces

ROOT = Path(__file__).resolve().parents[2]
TASK = ROOT / "examples" / "epidemic-sir"


def score(path: Path) -> float:
    proc = subprocess.run([sys.executable, str(TASK / "evaluate.py"), str(path)], capture_output=True, text=True,
                          timeout=60, cwd=TASK)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert (result["metric"], result["higher_is_better"], result["n"]) == ("mean_relative_error", False, 2)
    return result["value"]


def truth() -> dict[str, float]:
    frame = pd.read_csv(TASK / "heldout" / "true_parameters.csv")
    return dict(zip(frame["parameter"], frame["value"]))


def run_in_sandbox_folder(tmp_path: Path, script: Path) -> subprocess.CompletedProcess:
    (tmp_path / "data").symlink_to(TASK / "data")
    return subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)


def test_the_task_has_no_law_file_and_states_the_law_and_ranges_to_agents():
    task = load_task(TASK)
    assessment = task.assessment()
    assert assessment.name == "parameters" and assessment.law_path() is None
    assert assessment.ranges() == {"beta": (0.01, 5.0), "gamma": (0.01, 5.0)}
    description = task.description()
    assert "dI/dt = beta * S * I / N - gamma * I" in description
    assert "- the law: stated in the task's text (no law file)" in description
    assert "- parameter ranges: `beta` in [0.01, 5], `gamma` in [0.01, 5]" in description
    assert all(low < truth()[n] < high for n, (low, high) in assessment.ranges().items())


def test_the_reports_scatter_around_the_documented_sir_outbreaks():
    k = truth()
    train = pd.read_csv(TASK / "data" / "train.csv")
    assert list(train.columns) == ["town", "N", "I0", "day", "I"]
    relative = []
    for _, rows in train.groupby("town"):
        n, i0 = float(rows["N"].iloc[0]), float(rows["I0"].iloc[0])
        days = rows["day"].to_numpy(dtype=float)
        sol = solve_ivp(lambda t, y: [-k["beta"] * y[0] * y[1] / n, k["beta"] * y[0] * y[1] / n - k["gamma"] * y[1]],
                        (0, days.max()), [n - i0, i0], t_eval=days, rtol=1e-9, atol=1e-8)
        big = sol.y[1] > 50  # rounding to whole people dominates tiny counts
        relative.extend(rows["I"].to_numpy()[big] / sol.y[1][big] - 1)
    assert abs(np.mean(relative)) < 0.03 and 0.05 < np.std(relative) < 0.11  # the documented 8 %


def test_the_offline_scientist_fits_the_law_it_read_from_the_text(tmp_path):
    spec = spec_of_task(load_task(TASK))
    assert spec.stated_law and not spec.law_path and spec.stated_law_problem == ""
    program = tmp_path / "main.py"
    program.write_text(LAW_FITS[0].render(LAW_FITS[0].default_params(), spec, seed=0))
    proc = run_in_sandbox_folder(tmp_path, program)
    assert proc.returncode == 0, proc.stderr
    assert "validation_rmse" in proc.stdout
    fitted = score(tmp_path / "parameters.csv")

    reference_dir = tmp_path / "reference"
    reference_dir.mkdir()
    assert run_in_sandbox_folder(reference_dir, TASK / "reference_baseline.py").returncode == 0
    reference = score(reference_dir / "parameters.csv")
    middle_file = tmp_path / "middle.csv"
    middle_file.write_bytes(load_task(TASK).assessment().trivial_predictions()["range_middle"])
    middle = score(middle_file)
    # the numbers README.md reports, and the ordering the example exists to show
    assert reference == pytest.approx(0.1694, abs=5e-4) and middle == pytest.approx(0.5042, abs=5e-4)
    assert fitted < 0.03 < reference < middle
    reproduction = pd.read_csv(tmp_path / "reproduction.csv")
    test = pd.read_csv(TASK / "data" / "test_features.csv")
    assert list(reproduction.columns) == ["id", "I"] and reproduction["id"].tolist() == test["id"].tolist()
    assert (reproduction["I"] >= 0).all() and reproduction["I"].max() > 100


def test_a_malformed_answer_is_refused(tmp_path):
    path = tmp_path / "p.csv"
    pd.DataFrame({"parameter": ["beta", "R0"], "value": [0.3, 2.5]}).to_csv(path, index=False)
    proc = subprocess.run([sys.executable, str(TASK / "evaluate.py"), str(path)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2 and "unknown parameter" in proc.stderr
    k = truth()
    pd.DataFrame({"parameter": ["gamma", "beta"], "value": [k["gamma"], k["beta"]]}).to_csv(path, index=False)
    assert score(path) == 0.0


def test_make_data_reproduces_the_committed_files(tmp_path):
    assert_make_data_reproduces(TASK, ("data/train.csv", "data/test_features.csv", "heldout/true_parameters.csv"),
                                tmp_path)
