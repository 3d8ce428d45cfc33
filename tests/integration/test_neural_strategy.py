"""The neural strategy trains inside Trellis's sandbox (torch loads under its file view, address
space and thread limits): on a task folder built here, whose requirements allow a PyTorch network,
the offline planner chooses the mixture of experts; its program prints one JSON metrics line per
epoch, writes checkpoint.pt, and, killed after a checkpoint and run again with it, resumes after
that epoch and ends with the very predictions of an uninterrupted run. A checkpoint made with
other data is not resumed. Few epochs on a small data set: seconds per run."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from engine import prompt_format as pf
from engine.offline import scientist
from engine.offline.strategy import DataSpec
from engine.offline.strategies import get_strategy
from engine.sandbox import ExecutionLimits, ExecutionRequest, ExecutionResult
from engine.sandbox.subprocess_executor import SubprocessExecutor
from tests.unit.test_neural_strategy import JUMPS, KEY, signal
from tests.unit.test_offline_scientist import REPORT, make_task, prompt

pytest.importorskip("torch")

EPOCHS = 8  # checkpoints after epochs 5 and 8 (CHECKPOINT_EVERY = 5)
SPEC = DataSpec("data/train.csv", "data/test_features.csv", "level", ("x",), "id", "predictions.csv")
LIMITS = ExecutionLimits(wall_seconds=120, cpu_seconds=120, memory_mb=2048)
KILL_AFTER = 5
SAVED = '    os.replace(CHECKPOINT_FILE + ".tmp", CHECKPOINT_FILE)\n'


@pytest.fixture(scope="module")
def task(tmp_path_factory) -> Path:
    return make_task(tmp_path_factory.mktemp("jumps") / "task", context=JUMPS, train=signal()[0], test=signal()[1],
                     requirements=("CPU only.", "A neural network (PyTorch) may be used."))


@pytest.fixture(scope="module")
def program(task) -> str:
    """The planner's choice, rendered for a few epochs."""
    plan = scientist.respond(prompt("planner", task, {"report": REPORT}), seed=0)
    key, params = pf.extract_strategy(plan)
    assert key == KEY, plan
    return get_strategy(key).render({**params, "epochs": EPOCHS}, SPEC, scientist.program_seed(0))


@pytest.fixture(scope="module")
def executor(tmp_path_factory) -> SubprocessExecutor:
    return SubprocessExecutor(root=tmp_path_factory.mktemp("runs"))


def run(executor: SubprocessExecutor, task: Path, code: str, **extra: Path) -> ExecutionResult:
    files = {rel: task / rel for rel in ("data/train.csv", "data/test_features.csv")}
    return executor.run(ExecutionRequest(code=code, input_files={**files, **extra}, limits=LIMITS))


def metrics(result: ExecutionResult) -> list[dict]:
    return [json.loads(line)["trellis_metric"] for line in result.stdout.splitlines() if line.startswith("{")]


@pytest.fixture(scope="module")
def uninterrupted(executor, task, program) -> ExecutionResult:
    result = run(executor, task, program)
    assert result.ok and not result.violations, result.stderr[-2000:]
    return result


@pytest.mark.slow
def test_it_trains_in_the_sandbox_printing_one_metrics_line_per_epoch_and_a_checkpoint(uninterrupted):
    lines = metrics(uninterrupted)
    assert [m["epoch"] for m in lines] == list(range(1, EPOCHS + 1))
    assert all(set(m) == {"epoch", "loss", "val", "lr"} and all(math.isfinite(v) for v in m.values()) for m in lines)
    assert lines[-1]["lr"] < lines[0]["lr"]  # the cosine schedule decays
    assert min(m["val"] for m in lines) < lines[0]["val"]  # it learns
    assert "device: cpu" in uninterrupted.stdout  # the sandbox hides any GPU
    assert {"checkpoint.pt", "predictions.csv"} <= set(uninterrupted.files)
    predicted = pd.read_csv(uninterrupted.workdir / "predictions.csv")
    assert len(predicted) == 40 and np.isfinite(predicted["level"]).all()


@pytest.mark.slow
def test_killed_after_a_checkpoint_it_resumes_there_and_ends_as_an_uninterrupted_run(executor, task, program,
                                                                                    uninterrupted):
    assert program.count(SAVED) == 1
    killed = run(executor, task, program.replace(SAVED, SAVED + f'    if state["epoch"] == {KILL_AFTER}:\n'
                                                 '        raise SystemExit("killed after a checkpoint")\n'))
    assert not killed.ok and [m["epoch"] for m in metrics(killed)] == list(range(1, KILL_AFTER + 1))
    resumed = run(executor, task, program, **{"checkpoint.pt": killed.workdir / "checkpoint.pt"})
    assert resumed.ok, resumed.stderr[-2000:]
    assert f"checkpoint: resumed after epoch {KILL_AFTER} of {EPOCHS}" in resumed.stdout
    assert [m["epoch"] for m in metrics(resumed)] == list(range(KILL_AFTER + 1, EPOCHS + 1))
    assert metrics(resumed) == metrics(uninterrupted)[KILL_AFTER:]
    assert resumed.files["predictions.csv"] == uninterrupted.files["predictions.csv"]


@pytest.mark.slow
def test_a_checkpoint_made_with_other_data_is_not_resumed(executor, task, program, uninterrupted, tmp_path):
    other = tmp_path / "other"
    (other / "data").mkdir(parents=True)
    train = pd.read_csv(task / "data" / "train.csv")
    train.assign(level=train["level"] + 1.0).to_csv(other / "data" / "train.csv", index=False)
    (other / "data" / "test_features.csv").write_bytes((task / "data" / "test_features.csv").read_bytes())
    result = run(executor, other, program, **{"checkpoint.pt": uninterrupted.workdir / "checkpoint.pt"})
    assert result.ok, result.stderr[-2000:]
    assert "was made with other data or settings; training from scratch" in result.stdout
    assert [m["epoch"] for m in metrics(result)] == list(range(1, EPOCHS + 1))
