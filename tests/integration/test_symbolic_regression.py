"""Symbolic regression really runs inside Trellis's sandbox (pyoperon's compiled extension loads
under its file view), finds a law outside the fixed forms of the parametric fits, extrapolates it
beyond the training range, and is deterministic for its seed."""
from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from engine.offline.strategy import DataSpec
from engine.offline.strategies import get_strategy
from engine.sandbox import ExecutionRequest
from engine.sandbox.subprocess_executor import SubprocessExecutor

pytest.importorskip("pyoperon")

SPEC = DataSpec("data/train.csv", "data/test_features.csv", "y", ("a", "b"), "id", "predictions.csv",
                extrapolate=True)


def law(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """A product of a power of one input and an exponential of the other: no power law, no
    exponential, no polynomial in the parametric fits' list of forms."""
    return np.sqrt(a) * np.exp(0.3 * b)


@pytest.fixture(scope="module")
def task(tmp_path_factory) -> tuple[Path, np.ndarray]:
    folder = tmp_path_factory.mktemp("law")
    rng = np.random.default_rng(11)
    a, b = rng.uniform(0.5, 2.0, 200), rng.uniform(0.5, 2.5, 200)
    train = pd.DataFrame({"a": a, "b": b, "y": law(a, b) * (1 + 0.005 * rng.normal(size=200))})
    far_a, far_b = rng.uniform(2.0, 3.5, 60), rng.uniform(0.5, 2.5, 60)  # longer than any training a
    train.to_csv(folder / "train.csv", index=False)
    pd.DataFrame({"id": range(60), "a": far_a, "b": far_b}).to_csv(folder / "test.csv", index=False)
    return folder, law(far_a, far_b)


@pytest.fixture(scope="module")
def executor(tmp_path_factory) -> SubprocessExecutor:
    return SubprocessExecutor(root=tmp_path_factory.mktemp("runs"))


def run(executor: SubprocessExecutor, folder: Path, key: str, params: dict | None = None, seed: int = 0):
    code = get_strategy(key).render(params or {}, SPEC, seed)
    result = executor.run(ExecutionRequest(code=code, input_files={
        "data/train.csv": folder / "train.csv", "data/test_features.csv": folder / "test.csv"}))
    assert result.ok, result.stderr[-2000:]
    return result


def relative_l2(result, truth: np.ndarray) -> float:
    predicted = pd.read_csv(io.BytesIO(result.read_file("predictions.csv")))["y"].to_numpy(dtype=float)
    return float(np.linalg.norm(predicted - truth) / np.linalg.norm(truth))


@pytest.mark.slow
def test_symbolic_regression_finds_a_law_the_parametric_forms_miss_and_extrapolates_it(task, executor):
    folder, truth = task
    symbolic = run(executor, folder, "symbolic_regression")
    assert "symbolic_regression: y = " in symbolic.stdout and not symbolic.violations
    errors = {key: relative_l2(run(executor, folder, key), truth) for key in ("power_law", "form_search")}
    assert relative_l2(symbolic, truth) < 0.25 * min(errors.values()), (relative_l2(symbolic, truth), errors)
    # Same seed, same program: the same predictions, byte for byte.
    assert run(executor, folder, "symbolic_regression").files["predictions.csv"] == symbolic.files["predictions.csv"]


@pytest.mark.slow
def test_log_space_is_used_only_for_positive_data_and_says_so_otherwise(task, executor, tmp_path):
    folder, truth = task
    logged = run(executor, folder, "symbolic_regression", {"target_space": "log"})
    assert "symbolic_regression: log y = " in logged.stdout
    assert relative_l2(logged, truth) < 0.05
    shifted = tmp_path / "shifted"
    shifted.mkdir()
    train = pd.read_csv(folder / "train.csv")
    train.assign(y=train["y"] - 3.0).to_csv(shifted / "train.csv", index=False)  # some targets now negative
    (shifted / "test.csv").write_bytes((folder / "test.csv").read_bytes())
    result = run(executor, shifted, "symbolic_regression", {"target_space": "log", "max_length": 15})
    assert "non-positive values, so the search runs on x and y themselves" in result.stdout
    assert relative_l2(result, truth - 3.0) < 0.2
