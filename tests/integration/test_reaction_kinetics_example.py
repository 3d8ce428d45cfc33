"""The reaction-kinetics example (answer kind 'parameters'): its evaluate.py scores a table of
rate constants (the shipped reference baseline well ahead of the engine's trivial baseline, the
range middle; the true constants 0), refuses malformed tables with the reason, and the law file's
PARAMETERS is the literal the engine reads. make_data.py reproduces the committed files."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from engine.assessment.parameters import law_ranges
from engine.task import load_task

from tests.example_files import assert_make_data_reproduces

ROOT = Path(__file__).resolve().parents[2]
TASK = ROOT / "examples" / "reaction-kinetics"
NAMES = ["k1", "k2"]


def evaluate(*args) -> subprocess.CompletedProcess:
    """The real command, as the engine runs it."""
    return subprocess.run([sys.executable, str(TASK / "evaluate.py"), *map(str, args)],
                          capture_output=True, text=True, timeout=60, cwd=TASK)


def score(path: Path) -> dict:
    proc = evaluate(path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().split("\n")
    assert len(lines) == 1, proc.stdout
    result = json.loads(lines[0])
    assert set(result) == {"metric", "value", "higher_is_better", "n"}
    assert (result["metric"], result["higher_is_better"], result["n"]) == ("mean_relative_error", False, 2)
    return result


def write(path: Path, rows) -> Path:
    pd.DataFrame(rows, columns=["parameter", "value"]).to_csv(path, index=False)
    return path


def truth() -> dict[str, float]:
    frame = pd.read_csv(TASK / "heldout" / "true_parameters.csv")
    assert list(frame.columns) == ["parameter", "value"]
    return dict(zip(frame["parameter"], frame["value"]))


def test_law_parameters_are_the_literal_the_engine_reads():
    ranges = law_ranges(TASK / "law.py")
    assert ranges == {"k1": (0.001, 10.0), "k2": (0.001, 10.0)}
    task = load_task(TASK)
    assessment = task.assessment()
    assert assessment.name == "parameters" and assessment.names == NAMES
    assert assessment.ranges() == ranges
    assert all(low < truth()[n] < high for n, (low, high) in ranges.items())


def test_the_law_file_states_the_ode_the_data_follow():
    from scipy.integrate import solve_ivp

    namespace: dict = {}
    exec(compile((TASK / "law.py").read_text(), "law.py", "exec"), namespace)
    assert (namespace["TIME"], namespace["GROUP"], namespace["OBSERVED"]) == ("t_min", "experiment", "B")
    assert tuple(namespace["STATE"]) == ("A", "B", "C") and namespace["T0"] == 0.0
    k = truth()
    train = pd.read_csv(TASK / "data" / "train.csv")
    assert list(train.columns) == ["experiment", "A0", "t_min", "B"]
    residuals = []
    for _, rows in train.groupby("experiment"):
        times = rows["t_min"].to_numpy()
        y0 = namespace["initial"](rows.iloc[0].to_dict())
        sol = solve_ivp(lambda t, y: namespace["rhs"](t, y, **k), (0.0, times.max()), y0, t_eval=times,
                        method="LSODA", rtol=1e-9, atol=1e-11)
        b = sol.y[namespace["STATE"].index("B")]
        a0 = rows["A0"].iloc[0]
        closed = a0 * k["k1"] / (k["k2"] - k["k1"]) * (np.exp(-k["k1"] * times) - np.exp(-k["k2"] * times))
        np.testing.assert_allclose(b, closed, rtol=1e-5, atol=1e-8)
        residuals.extend((rows["B"].to_numpy() - b) / (0.04 * b + 0.002))
    assert abs(np.mean(residuals)) < 0.3 and 0.5 < np.std(residuals) < 1.5  # the documented noise


def test_files_hold_experiments_and_new_query_rows():
    train = pd.read_csv(TASK / "data" / "train.csv")
    test = pd.read_csv(TASK / "data" / "test_features.csv")
    assert list(test.columns) == ["id", "experiment", "A0", "t_min"]
    assert test["id"].tolist() == list(range(len(test)))
    assert not set(test["experiment"]) & set(train["experiment"])
    sizes = train.groupby("experiment").size()
    assert 10 <= len(sizes) <= 14 and sizes.between(8, 12).all()
    assert (train.groupby("experiment")["A0"].nunique() == 1).all() and train["A0"].nunique() == len(sizes)
    assert (train["B"] >= 0).all() and (train["t_min"] > 0).all()


def test_the_reference_baseline_beats_the_range_middle(tmp_path):
    (tmp_path / "data").symlink_to(TASK / "data")
    proc = subprocess.run([sys.executable, str(TASK / "reference_baseline.py")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    reference = score(tmp_path / "parameters.csv")["value"]

    # the trivial baseline as the engine computes it (each range's geometric middle)
    middle_rows = [[n, math.sqrt(low * high)] for n, (low, high) in law_ranges(TASK / "law.py").items()]
    middle = score(write(tmp_path / "middle.csv", middle_rows))["value"]
    engine_middle = load_task(TASK).assessment().trivial_predictions()["range_middle"]
    (tmp_path / "engine_middle.csv").write_bytes(engine_middle)
    assert score(tmp_path / "engine_middle.csv")["value"] == pytest.approx(middle, rel=1e-12)
    # the numbers README.md reports, and a clear margin between them
    assert reference == pytest.approx(0.0784, abs=5e-4) and middle == pytest.approx(0.4238, abs=5e-4)
    assert reference < 0.5 * middle


def test_true_parameters_score_zero_in_any_row_order(tmp_path):
    k = truth()
    assert score(write(tmp_path / "p.csv", [["k2", k["k2"]], ["k1", k["k1"]]]))["value"] == 0.0


def test_the_score_is_the_mean_relative_error(tmp_path):
    k = truth()
    result = score(write(tmp_path / "p.csv", [["k1", 1.1 * k["k1"]], ["k2", 0.7 * k["k2"]]]))
    assert result["value"] == pytest.approx((0.1 + 0.3) / 2, rel=1e-9)


def _true_rows() -> pd.DataFrame:
    return pd.read_csv(TASK / "heldout" / "true_parameters.csv")


def _with_value(value):
    def corrupt(df):
        out = df.astype({"value": object})
        out.loc[1, "value"] = value
        return out
    return corrupt


MALFORMED = {
    "missing_parameter": (lambda df: df.iloc[:1], "missing parameter"),
    "duplicate_parameter": (lambda df: pd.concat([df, df.iloc[:1]]), "duplicate parameter"),
    "unknown_parameter": (lambda df: pd.concat([df, pd.DataFrame({"parameter": ["k3"], "value": [0.2]})]),
                          "unknown parameter"),
    "renamed_parameter": (lambda df: df.assign(parameter=["k1", "K2"]), "unknown parameter"),
    "text": (_with_value("fast"), "non-numeric"),
    "empty_value": (_with_value(""), "no value"),
    "nan": (_with_value("nan"), "NaN or inf"),  # as text: pandas would write a NaN as an empty field
    "inf": (_with_value(float("inf")), "NaN or inf"),
    "no_value_column": (lambda df: df.rename(columns={"value": "estimate"}), "missing column"),
    "no_parameter_column": (lambda df: df[["value"]], "missing column"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_parameters_are_rejected_with_the_reason(case, tmp_path):
    corrupt, message = MALFORMED[case]
    corrupt(_true_rows()).to_csv(tmp_path / "parameters.csv", index=False)
    proc = evaluate(tmp_path / "parameters.csv")
    assert proc.returncode == 2 and proc.stdout == ""
    assert message in proc.stderr, proc.stderr


def test_a_missing_file_and_a_truth_option_are_refused(tmp_path):
    proc = evaluate(tmp_path / "absent.csv")
    assert proc.returncode == 2 and proc.stdout == "" and "not found" in proc.stderr
    write(tmp_path / "p.csv", _true_rows().values.tolist())
    proc = evaluate(tmp_path / "p.csv", "--truth", tmp_path / "p.csv")  # no --truth mode
    assert proc.returncode == 2 and proc.stdout == ""


def test_make_data_reproduces_the_committed_files(tmp_path):
    assert_make_data_reproduces(TASK, ("data/train.csv", "data/test_features.csv", "heldout/true_parameters.csv"),
                                tmp_path)


def test_the_same_task_with_its_law_only_in_the_text_gives_the_same_constants(tmp_path):
    """The task's Problem.md writes the ODE in prose too: without law.py (ranges in Data_config
    instead) the offline scientist reads it from the text and fits the constants README.md reports
    for the law file (k1 = 0.3430, k2 = 0.1167; tests/integration/test_law_fit.py runs that one)."""
    import shutil

    from engine.offline.law_fit import LAW_FITS
    from engine.offline.strategy import spec_of_task

    prose_task = tmp_path / "kinetics-in-prose"
    shutil.copytree(TASK, prose_task)
    (prose_task / "law.py").unlink()
    cfg = json.loads((prose_task / "Data_config.json").read_text())
    del cfg["files"]["law"], cfg["answer"]["law"]
    cfg["answer"]["ranges"] = {n: list(b) for n, b in law_ranges(TASK / "law.py").items()}
    (prose_task / "Data_config.json").write_text(json.dumps(cfg))

    spec = spec_of_task(load_task(prose_task))
    assert not spec.law_path and "B(0) = 0" in spec.stated_law  # "with no B and no C", read as a start
    workdir = tmp_path / "run"
    workdir.mkdir()
    (workdir / "data").symlink_to(TASK / "data")
    (workdir / "main.py").write_text(LAW_FITS[0].render(LAW_FITS[0].default_params(), spec, seed=0))
    proc = subprocess.run([sys.executable, "main.py"], cwd=workdir, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    fitted = dict(pd.read_csv(workdir / "parameters.csv").values)
    assert fitted["k1"] == pytest.approx(0.3430, abs=6e-4) and fitted["k2"] == pytest.approx(0.1167, abs=6e-4)
    assert score(workdir / "parameters.csv")["value"] < 0.01
