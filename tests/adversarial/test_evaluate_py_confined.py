"""The task's own evaluate.py runs under the same sandbox and limits as the agents' programs
(issue 26 item 16).

A task folder can be uploaded by any member of a project, so its evaluate.py is code nobody here
vetted. On the old engine it ran beside the task folder as the engine's user with no limit at all
(1.4 GB on a 10^7-row file; as root, anything). Each test here failed there."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from engine.errors import TaskSpecError
from engine.evaluation import evaluate_many, evaluate_predictions
from engine.preflight import PreflightError, preflight
from engine.task import load_task

pytestmark = pytest.mark.skipif(os.uname().sysname != "Linux", reason="the sandbox is Linux-only")

HOG = "blocks = []\nwhile True:\n    blocks.append(bytearray(64 * 1024 * 1024))\n"


@pytest.fixture
def task_dir(examples, tmp_path) -> Path:
    folder = tmp_path / "task"
    shutil.copytree(examples / "discontinuous-1d", folder)
    config = json.loads((folder / "Data_config.json").read_text())
    config["limits"] = {**config.get("limits", {}), "memory_mb": 600}
    (folder / "Data_config.json").write_text(json.dumps(config))
    return folder


def _predictions(folder: Path) -> bytes:
    ids = [line.split(",")[0] for line in (folder / "heldout" / "test_targets.csv").read_text().splitlines()[1:]]
    return ("id,y\n" + "".join(f"{i},0.5\n" for i in ids)).encode()


def _prepend(folder: Path, code: str) -> None:
    source = (folder / "evaluate.py").read_text()
    head, _, rest = source.partition("\nimport ")
    (folder / "evaluate.py").write_text(f"{head}\n{code}\nimport {rest}")


def test_an_evaluate_py_that_takes_all_the_memory_is_stopped_at_the_tasks_limit(task_dir):
    predictions = _predictions(task_dir)
    _prepend(task_dir, HOG)
    task = load_task(task_dir)
    official = evaluate_predictions(task, predictions, timeout_s=60)
    assert official["ok"] is False and "memory limit of 600 MB" in official["error"]
    assert "memory limit of 600 MB" in evaluate_many(task, [predictions], timeout_s=60)[0]["error"]
    with pytest.raises(PreflightError) as info:
        preflight(task, timeout_s=60)
    assert any("evaluate.py" in p and "600 MB" in p for p in info.value.problems), info.value.problems


def test_an_evaluate_py_cannot_reach_the_machine(task_dir, tmp_path):
    secret = tmp_path / "engine-secret.txt"
    secret.write_text("the studio's secret")
    os.chmod(secret, 0o600)
    predictions = _predictions(task_dir)
    _prepend(task_dir, f"""
import socket
leaks = []
try:
    leaks.append(open({str(secret)!r}).read())
except OSError:
    pass
try:
    socket.create_connection(("127.0.0.1", 22), timeout=1)
    leaks.append("network")
except OSError:
    pass
try:
    open({str(task_dir / "evaluate.py")!r}, "a").write("# changed by itself")
    leaks.append("wrote its own task folder")
except OSError:
    pass
if leaks:
    print("LEAKED", leaks)
""")
    before = (task_dir / "evaluate.py").read_text()
    result = evaluate_predictions(load_task(task_dir), predictions, timeout_s=60)
    assert "LEAKED" not in json.dumps(result)
    assert (task_dir / "evaluate.py").read_text() == before


def test_scoring_a_validation_fold_has_no_answer_key_in_its_sandbox(task_dir, tmp_path):
    from engine.evaluation import FoldJob, evaluate_folds

    _prepend(task_dir, """
import os, sys
if "--truth" in sys.argv:
    here = os.path.dirname(os.path.abspath(__file__))
    print("HELDOUT PRESENT" if os.path.exists(os.path.join(here, "heldout")) else "no heldout", file=sys.stderr)
""")
    truth = tmp_path / "truth.csv"
    truth.write_text("id,y\n1,0.5\n2,0.25\n")
    predictions = tmp_path / "predictions.csv"
    predictions.write_text("id,y\n1,0.5\n2,0.25\n")
    [score] = evaluate_folds(load_task(task_dir), [FoldJob(predictions, truth)], timeout_s=60)
    assert score["ok"], score
    official = evaluate_predictions(load_task(task_dir), _predictions(task_dir), timeout_s=60)
    assert official["ok"], official  # officially, the answer key is there


def test_a_broken_evaluate_py_is_still_a_clear_task_error(task_dir):
    (task_dir / "evaluate.py").write_bytes(b"\xff\xfe not python")
    with pytest.raises((PreflightError, TaskSpecError)):
        preflight(load_task(task_dir), timeout_s=30)
