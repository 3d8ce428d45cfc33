"""Task folders that fight preflight: an evaluate.py that hangs, floods or lies, data that is not
text, a poisoned preflight cache. Each ends in a clear problem (or is shrugged off), never a hang,
a traceback or a check skipped."""
import json
import shutil
import time
from pathlib import Path

import pytest

from engine.preflight import PreflightError, preflight
from engine.task import load_task


@pytest.fixture
def task_dir(examples, tmp_path) -> Path:
    folder = tmp_path / "task"
    shutil.copytree(examples / "discontinuous-1d", folder)
    return folder


def _problems(folder: Path, **kwargs) -> list[str]:
    with pytest.raises(PreflightError) as info:
        preflight(load_task(folder), **kwargs)
    return info.value.problems


def test_an_evaluate_py_that_hangs_is_stopped_at_the_timeout(task_dir):
    (task_dir / "evaluate.py").write_text("# takes --truth\nimport time\ntime.sleep(60)\n")
    started = time.perf_counter()
    problems = _problems(task_dir, timeout_s=2)
    assert time.perf_counter() - started < 10
    assert any("evaluate.py did not finish within 2 s" in p for p in problems)


def test_an_evaluate_py_that_floods_stdout_is_read_to_its_last_json_line_or_refused(task_dir):
    (task_dir / "evaluate.py").write_text("# takes --truth\nimport sys\nfor _ in range(200000):\n"
                                          "    sys.stdout.write('noise ' * 10 + '\\n')\n")
    problem = next(p for p in _problems(task_dir) if "evaluate.py" in p)
    assert "no JSON line" in problem and len(problem) < 600


def test_an_evaluate_py_that_names_no_metric_is_refused(task_dir):
    (task_dir / "evaluate.py").write_text('# takes --truth\nprint(\'{"value": 0.1}\')\n')
    assert any("no JSON line" in p for p in _problems(task_dir))


def test_binary_data_is_named_not_a_traceback(task_dir):
    (task_dir / "data" / "train.csv").write_bytes(b"\xff\xfe\x00junk\x00\x81" * 100)
    assert any(p.startswith("data/train.csv: is not UTF-8") for p in _problems(task_dir))


def test_a_poisoned_cache_entry_is_ignored(task_dir, tmp_path):
    cache = tmp_path / "cache"
    preflight(load_task(task_dir), cache_dir=cache)
    for entry in cache.glob("*.json"):
        entry.write_text(json.dumps(["not", "an", "outcome"]))
    from engine import preflight as module

    module._MEMO.clear()
    facts = preflight(load_task(task_dir), cache_dir=cache)
    assert facts.evaluate_metric == "relative_l2"


def test_an_edited_evaluate_py_is_run_again_not_read_from_the_cache(task_dir, tmp_path):
    cache = tmp_path / "cache"
    assert preflight(load_task(task_dir), cache_dir=cache).evaluate_metric == "relative_l2"
    source = (task_dir / "evaluate.py").read_text()
    # computed, so that only a run (not the source scan) can see the new name
    edited = source.replace('METRIC = "relative_l2"', 'METRIC = "relative_l2".replace("relative_l2", "rmse")')
    (task_dir / "evaluate.py").write_text(edited)
    assert edited != source
    problem = next(p for p in _problems(task_dir, cache_dir=cache) if "'rmse'" in p)
    assert "read from its source" not in problem


def test_thousands_of_missing_values_make_one_bounded_message(task_dir):
    lines = (task_dir / "data" / "train.csv").read_text().splitlines()
    header, rows = lines[0], lines[1:]
    (task_dir / "data" / "train.csv").write_text("\n".join([header, *(",".join(["", r.split(",")[1]]) for r in rows)]) + "\n")
    problems = _problems(task_dir)
    msg = next(p for p in problems if "'x'" in p and "missing" in p)
    assert f"{len(rows)} missing" in msg and "more" in msg and len(msg) < 300
