"""Issue 27 item 6: a search never dies of one probe.

Before: a SciMARS probe whose team delivered no program was cached with no program to verify;
the next time the same harness came up (the next round's reference) it was run again and its
reuse receipt was built with ``program_sha256=None``, which the event refused: the whole
search died with a pydantic ValidationError. Here every program the team writes crashes in the
sandbox (the fake executor, scripted), so no probe ever delivers a program.
"""
from __future__ import annotations

import io
from pathlib import Path

from engine.budget import Budget
from engine.evolve import evolve
from engine.run_spec import RunSpec
from engine.search.probe import ProbeRunner
from engine.search.scimars import ReuseCache
from engine.synthesis import team_workflow
from engine.task import load_task
from engine.trace import ListSink, Tracer
from tests.fakes import FakeExecutor, Outcome, traceback_of

DIABETES = Path(__file__).resolve().parents[2] / "examples" / "diabetes-progression"


def _crashes(code: str) -> Outcome | None:
    """Every program that would write predictions crashes; exploration scripts still run."""
    if "to_csv" in code or "predictions" in code:
        return Outcome("error", stderr=traceback_of("RuntimeError: the solver diverged"))
    return None


def _official(task, run_dir, predictions_sha256):
    return {"ok": False, "error": "nothing delivered"}


def test_a_probe_that_delivered_no_program_is_run_again_with_a_receipt_saying_why(tmp_path):
    task = load_task(DIABETES)
    sink = ListSink()
    runner = ProbeRunner(task, Budget(max_tokens=1_000_000), tmp_path / "probes", seed=0,
                         executor=FakeExecutor(tmp_path / "sandbox", script=_crashes))
    cache = ReuseCache(runner, Tracer("reuse", [sink]))
    workflow = team_workflow(task)
    first, _ = cache.probe(workflow, "reference", 1)
    assert first.result.final_code is None or first.result.predictions_sha256 is None  # delivered nothing
    again, receipt = cache.probe(workflow, "again", 1)
    assert runner.count == 2  # nothing intact to reuse: run again
    assert receipt["verified"] is False and receipt["program_sha256"] is None
    assert "no final code or predictions" in receipt["reason"]
    (traced,) = [e.payload for e in sink.events if e.kind == "reuse_receipt"]
    assert traced["rerun_id"] == again.result.run_id


def test_scimars_goes_on_when_no_probe_delivers_a_program(tmp_path):
    sink, out = ListSink(), io.StringIO()
    result = evolve(DIABETES, RunSpec(search="scimars", iterations=2, seed=1, single_agent=False), runs_dir=tmp_path,
                    out=out, executor=FakeExecutor(tmp_path / "sandbox", script=_crashes), sinks=[sink],
                    official=_official)
    # both rounds ran (round 2's reference is round 1's harness, which delivered nothing)
    assert result.iterations == 2
    receipts = [e.payload for e in sink.events if e.kind == "reuse_receipt"]
    assert receipts and all(not r["verified"] for r in receipts)
    assert sink.events[-1].kind == "search_finished"
    assert "no official score" in result.failed  # said, not crashed
