"""The separable scaling fit (engine/offline/parametric.py) in Trellis's sandbox: when the test
rows extend past the training range in one input, a power law in that input times a free smooth
shape in the others extrapolates where a single power law or a fixed form cannot."""
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

SPEC = DataSpec("data/train.csv", "data/test_features.csv", "y", ("size", "angle", "colour"), "id",
                "predictions.csv", extrapolate=True)


def law(size, angle):
    # a power of the extrapolated input times a shape no power law has (and colour has no effect)
    return 3.0 * size ** 1.5 * (1.0 + 0.4 * np.sin(angle) ** 2)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> tuple[Path, np.ndarray]:
    folder = tmp_path_factory.mktemp("scaling")
    rng = np.random.default_rng(5)
    size, angle, colour = rng.uniform(0.2, 1.0, 300), rng.uniform(0.0, 3.0, 300), rng.uniform(0, 1, 300)
    y = law(size, angle) * (1 + 0.003 * rng.normal(size=300))
    pd.DataFrame({"size": size, "angle": angle, "colour": colour, "y": y}).to_csv(folder / "train.csv", index=False)
    far = rng.uniform(1.0, 1.6, 80)  # every test row is larger than any training row
    angle_t, colour_t = rng.uniform(0.0, 3.0, 80), rng.uniform(0, 1, 80)
    pd.DataFrame({"id": range(80), "size": far, "angle": angle_t, "colour": colour_t}).to_csv(folder / "test.csv", index=False)
    return folder, law(far, angle_t)


@pytest.mark.slow
def test_a_power_in_the_extrapolated_input_times_a_free_shape_beats_the_fixed_forms(folder, tmp_path):
    data, truth = folder
    executor = SubprocessExecutor(root=tmp_path)

    def error(key: str) -> tuple[float, str]:
        code = get_strategy(key).render({}, SPEC, 0)
        result = executor.run(ExecutionRequest(code=code, input_files={
            "data/train.csv": data / "train.csv", "data/test_features.csv": data / "test.csv"}))
        assert result.ok, result.stderr[-2000:]
        predicted = pd.read_csv(io.BytesIO(result.read_file("predictions.csv")))["y"].to_numpy(dtype=float)
        return float(np.linalg.norm(predicted - truth) / np.linalg.norm(truth)), result.stdout

    separable, said = error("separable_scaling")
    assert "separable_scaling: y = " in said and "x0 ** 1.5" in said  # it found the exponent of size
    others = {key: error(key)[0] for key in ("power_law", "form_search")}
    assert separable < 0.01 and separable < 0.2 * min(others.values()), (separable, others)
