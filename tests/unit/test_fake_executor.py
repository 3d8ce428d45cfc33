"""The fake executor the search tests rely on: deterministic, code-sensitive, scriptable."""
import pytest

from engine.sandbox import ExecutionRequest
from engine.task import load_task
from tests.fakes import FakeExecutor, Outcome, fail_first, traceback_of

TRAINING = 'import pandas as pd\nPREDICTIONS_FILE = "predictions.csv"\nprint({n})\n'
EXPLORATION = 'import pandas as pd\nprint(pd.read_csv("data/train.csv").describe())\n'


@pytest.fixture
def diabetes(examples):
    return load_task(examples / "diabetes-progression")


def _run(executor, task, code):
    return executor.run(ExecutionRequest(code=code, input_files=task.input_files()))


def test_a_training_program_writes_one_prediction_per_test_id(diabetes, tmp_path):
    result = _run(FakeExecutor(tmp_path), diabetes, TRAINING.format(n=1))
    assert result.ok and result.exit_code == 0 and list(result.files) == ["predictions.csv"]
    lines = result.read_file("predictions.csv").decode().splitlines()
    assert lines[0] == "id,progression"
    ids = [line.split(",")[0] for line in lines[1:]]
    assert ids == [str(i) for i in range(88)]
    assert len({line.split(",")[1] for line in lines[1:]}) > 1  # values vary: the checks pass
    assert (result.workdir / "data" / "train.csv").is_file() and (result.workdir / "main.py").is_file()


def test_the_same_program_scores_the_same_and_another_program_differently(diabetes, tmp_path):
    executor = FakeExecutor(tmp_path)
    a1, _ = diabetes.assessment().validate(TRAINING.format(n=1), executor)
    a2, _ = diabetes.assessment().validate(TRAINING.format(n=1), executor)
    b, _ = diabetes.assessment().validate(TRAINING.format(n=2), executor)
    assert a1["ok"] and b["ok"]
    assert a1["value"] == a2["value"] != b["value"]
    assert len(executor.requests) == 15  # five folds each


def test_an_exploration_script_prints_a_data_report(diabetes, tmp_path):
    result = _run(FakeExecutor(tmp_path), diabetes, EXPLORATION)
    assert result.ok and result.files == {}
    assert result.stdout.startswith("# Exploratory data analysis")
    assert "training rows: 354; test rows: 88" in result.stdout and "target: progression" in result.stdout


def test_code_that_does_not_parse_fails_like_python(diabetes, tmp_path):
    result = _run(FakeExecutor(tmp_path), diabetes, "def fit(:\n    return\n")
    assert result.status == "error" and result.exit_code == 1 and "SyntaxError" in result.stderr


def test_scripted_outcomes_make_a_run_fail(diabetes, tmp_path):
    crash = Outcome("error", stderr=traceback_of("KeyError: 'progresion'"))
    executor = FakeExecutor(tmp_path, script={"print(1)": crash, "print(2)": Outcome("timeout")})
    crashed = _run(executor, diabetes, TRAINING.format(n=1))
    assert crashed.status == "error" and "KeyError" in crashed.stderr and crashed.files == {}
    assert _run(executor, diabetes, TRAINING.format(n=2)).status == "timeout"
    assert _run(executor, diabetes, TRAINING.format(n=3)).ok

    once = FakeExecutor(tmp_path / "once", script=fail_first("PREDICTIONS_FILE", crash))
    assert [_run(once, diabetes, TRAINING.format(n=1)).status for _ in range(2)] == ["error", "ok"]
