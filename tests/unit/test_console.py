"""The command line's progress lines: a failed execution shows why it failed, long text is cut
at a word, and the sandbox's note about running without root is said once per process."""
import io
import logging

import pytest

from engine.console import MESSAGE_LIMIT, ConsoleSink, describe, shorten
from engine.sandbox import ExecutionRequest, ExecutionResult
from engine.sandbox import subprocess_executor
from engine.sandbox.subprocess_executor import SubprocessExecutor
from engine.trace import Event

TRACEBACK = """Traceback (most recent call last):
  File "main.py", line 12, in <module>
    train = pd.read_csv(TRAIN_PATH)
  File "pandas/io/parsers.py", line 912, in read_csv
    return _read(filepath_or_buffer, kwds)
  File "pandas/core/frame.py", line 3761, in __getitem__
    indexer = self.columns.get_loc(key)
KeyError: 'period'
"""


def _event(kind, payload, agent="verifier", ts=1.0):
    return Event(seq=1, run_id="r", ts=ts, kind=kind, agent=agent, payload=payload)


def _execution(status, stderr):
    return {"purpose": "candidate solution", "status": status, "exit_code": 1 if status != "ok" else 0,
            "stdout_tail": "", "stderr_tail": stderr, "duration_s": 0.4, "files": {}, "violations": [],
            "executor": "subprocess", "stdout": "", "stderr": stderr, "workdir": "/tmp/x"}


def test_a_failed_execution_prints_the_last_lines_of_its_stderr():
    out = io.StringIO()
    ConsoleSink(out).emit(_event("code_execution", _execution("error", TRACEBACK)))
    lines = out.getvalue().splitlines()
    assert "ran code (candidate solution): error exit 1" in lines[0]
    assert lines[-1].strip() == "| KeyError: 'period'"  # the cause, last, where the eye lands
    assert len(lines) == 1 + 5 and "Traceback" not in out.getvalue()  # only the last five lines
    assert all(ln.startswith(" " * 24) for ln in lines[1:])  # set under the event's text


def test_a_successful_execution_stays_one_line_and_a_silent_failure_says_so():
    ok = describe(_event("code_execution", _execution("ok", "a warning\n")))
    assert "\n" not in ok
    killed = describe(_event("code_execution", _execution("timeout", "")))
    assert killed.splitlines()[-1].strip() == "| (nothing on stderr)"


def test_long_messages_are_cut_at_a_word_boundary_never_mid_word():
    message = " ".join(f"word{i}" for i in range(200))  # words of 5 to 7 characters
    line = describe(_event("agent_finished", {"status": "RETRY", "message": message, "outputs": {}}))
    text = line.split(" - ", 1)[1]
    assert text.endswith("…") and len(text) <= MESSAGE_LIMIT
    kept = text[:-1].split(" ")
    assert kept == message.split(" ")[: len(kept)]  # whole words only, in order
    assert shorten("short enough") == "short enough"
    assert shorten("alpha beta gamma", limit=12) == "alpha beta…"
    assert shorten("alpha beta gamma", limit=11) == "alpha beta…"  # the boundary falls just before a space
    assert shorten("alpha\n  beta", limit=None) == "alpha beta"  # one line, whatever the limit


def test_verbose_prints_messages_whole():
    message = "x " * 400
    out = io.StringIO()
    ConsoleSink(out, verbose=True).emit(_event("check", {"name": "within_range", "passed": False, "detail": message}))
    assert "…" not in out.getvalue() and out.getvalue().count("x") == 400


def test_the_uid_notice_prints_once_per_process(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(subprocess_executor, "_shared_uid_warned", False)
    monkeypatch.setattr(SubprocessExecutor, "drops_privileges", property(lambda self: False))

    def fake_execute(self, workdir, request, entrypoint, ids, view_root):
        return ExecutionResult(status="ok", exit_code=0, stdout="", stderr="", duration_s=0.0, workdir=workdir,
                               files={}, executor=self.name)

    monkeypatch.setattr(SubprocessExecutor, "_execute", fake_execute)
    with caplog.at_level(logging.WARNING, logger="engine.sandbox.subprocess_executor"):
        for root in ("a", "b"):  # two executors, as two runs of one process would have
            executor = SubprocessExecutor(root=tmp_path / root)
            for _ in range(3):
                executor.run(ExecutionRequest(code="print(1)", input_files={}))
    notices = [r for r in caplog.records if "not running as root" in r.getMessage()]
    assert len(notices) == 1


def test_what_a_role_was_given_from_memory_is_one_line_and_records_only_with_verbose():
    given = _event("memory_retrieval", {"role": "planner", "records": [4, 2], "pushed": [7]}, agent="planner")
    assert describe(given) == "memory: given record(s) #4, #2, #7"
    assert describe(_event("memory_retrieval", {"role": "coder", "records": [], "pushed": []})) is None
    record = {"id": 4, "lineage": 4, "version": 1, "kind": "check_result", "text": "FAIL output_schema:\n lacks y",
              "author": {"agent": "verifier"}, "provenance": {}}
    recorded = _event("evidence_recorded", {"record": record, "links": []})
    assert describe(recorded) is None  # every record would drown the run's progress
    assert describe(recorded, limit=None) == "recorded #4 check_result: FAIL output_schema: lacks y"
