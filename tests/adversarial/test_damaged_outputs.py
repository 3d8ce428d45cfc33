"""Faults found by the attacker (issue 26): a damaged trace, a predictions "file" that is a socket
or a FIFO, predictions that overflow to infinity. Each once crashed a search or passed a score
that is not a number; each must be a failed program or a skipped line, never a crashed run."""
from __future__ import annotations

import io
import json
import os

import pytest

from engine.evolve import evolve
from engine.run_spec import RunSpec
from engine.trace import read_events
from tests.fakes import FakeExecutor, split_spec
from tests.unit.test_mimosa import DIABETES, stand_in_official


def _event(seq: int) -> bytes:
    return json.dumps({"run_id": "r", "seq": seq, "ts": 1.0, "kind": "note", "payload": {}}).encode() + b"\n"


def test_a_trace_line_that_is_not_utf8_or_not_an_event_is_skipped_not_fatal(tmp_path):
    trace = tmp_path / "trace.jsonl"
    trace.write_bytes(_event(1) + b'{"run_id": "r", "seq": 2, "kind": "\xff\xfe"}\n' + b"[1, 2]\n" + b'"text"\n'
                      + _event(3) + b'{"run_id": "r", "se')
    assert [e.seq for e in read_events(trace)] == [1, 3]


def test_a_search_resumes_although_a_probe_trace_holds_a_line_of_bad_bytes(tmp_path):
    checkpoints = []
    run_dir = tmp_path / "run"

    def run(iterations, **kw):
        return evolve(DIABETES, split_spec(RunSpec(search="mimosa", iterations=iterations, seed=1, single_agent=False), kw),
                      runs_dir=tmp_path, out=io.StringIO(), executor=FakeExecutor(tmp_path / "sandbox"),
                      official=stand_in_official, run_dir=run_dir, **kw)

    run(1, on_checkpoint=checkpoints.append)
    traces = sorted(run_dir.rglob("trace.jsonl"))
    assert len(traces) >= 2  # the search's own and its probes'
    for trace in traces:
        with trace.open("ab") as fh:
            fh.write(b"\xff\xfe not utf-8 \x80\n")
    resumed = run(2, resume=checkpoints[-1])
    assert resumed.iterations == 2 and not resumed.failed


class _LeavesBehind:
    """An executor whose program 'succeeds' and leaves ``make(workdir)`` as its predictions."""

    name = "fake"

    def __init__(self, root, make):
        self.root, self.make = root, make

    def run(self, request):
        from engine.sandbox import ExecutionResult

        workdir = self.root / "work"
        workdir.mkdir(parents=True, exist_ok=True)
        self.make(workdir / "predictions.csv")
        return ExecutionResult("ok", 0, "", "", 0.1, workdir, {})


def _socket(path):
    import socket

    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    return s


@pytest.mark.parametrize("kind", ["socket", "fifo"])
def test_predictions_that_are_a_socket_or_a_fifo_are_a_failed_program_not_a_crash(tmp_path, kind):
    from engine.official import official_for_code
    from engine.task import load_task
    from engine.validation import read_answer

    held = []
    make = (lambda p: held.append(_socket(p))) if kind == "socket" else os.mkfifo
    executor = _LeavesBehind(tmp_path, make)
    task = load_task(DIABETES)
    scored = official_for_code(task, "print(1)", executor)
    assert scored["ok"] is False and ("a socket" if kind == "socket" else "a FIFO") in scored["error"]
    (tmp_path / "work" / "predictions.csv").unlink()
    data, problem = read_answer(task, executor.run(None))
    assert data == b"" and "predictions refused" in problem
    for s in held:
        s.close()


def test_predictions_that_overflow_the_metric_are_a_failed_score_never_infinity(tmp_path):
    import csv

    from engine.evaluation import evaluate_predictions
    from engine.task import load_task
    from engine.validation import ValidationSplit, score_predictions

    task = load_task(DIABETES)
    r = task.resources
    with (DIABETES / r.files["test_features"]).open() as fh:
        ids = [row[r.id_column] for row in csv.DictReader(fh)]
    huge = f"{r.id_column},{r.target}\n" + "".join(f"{i},1e308\n" for i in ids)
    scored = evaluate_predictions(task, huge.encode())
    assert scored["ok"] is False and "not a finite number" in scored["error"]
    json.dumps(scored, allow_nan=False)  # nothing that travels as JSON Infinity

    # the engine's own fold scorer (for an evaluate.py without --truth) says the same
    split = ValidationSplit({}, tmp_path / "truth.csv", {"1": "1.0", "2": "2.0"}, 10, 2)
    fold = score_predictions(task, split, f"{r.id_column},{r.target}\n1,1e308\n2,1e308\n".encode())
    assert fold["ok"] is False and "not a finite number" in fold["error"]
