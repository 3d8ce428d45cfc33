"""One state fold (engine/replay.py), kept true the way Zulip keeps ``apply_events`` true: for
every shipped search, a real run (the offline scientist, programs in the subprocess sandbox) is
folded from its events, one at a time as a page receives them, and the fold must equal the
state the engine computed at the end: each workflow run's result as the runner returned it, the
search's spend as its budget counted it, what it committed to, what the judge wrote down."""
from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

import engine.search.probe
from engine.evolve import evolve
from engine.replay import SearchState, fold
from engine.run_spec import RunSpec
from engine.search.probe import JUDGEMENT_FILE
from engine.search.registry import SEARCHES
from engine.trace import ListSink

ROOT = Path(__file__).resolve().parents[2]
TASK = ROOT / "examples" / "discontinuous-1d"

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("search", SEARCHES)
def test_the_fold_of_a_runs_events_is_the_state_it_ended_in(search, tmp_path, monkeypatch):
    runs = []  # every workflow run of the search, as the runner returned it
    run_workflow = engine.search.probe.run_workflow
    monkeypatch.setattr(engine.search.probe, "run_workflow",
                        lambda *args, **kw: runs.append(result := run_workflow(*args, **kw)) or result)
    sink = ListSink()
    result = evolve(TASK, RunSpec(search=search, iterations=1, seed=1, start="team", max_tokens=3_000_000,
                                  single_agent=False, executor="subprocess"),
                    run_dir=tmp_path / "run", out=io.StringIO(), archive_dir=tmp_path / "archive", sinks=[sink])

    state = SearchState()
    for event in sink.events:   # one at a time, as a page receives them
        state.apply(event)
    assert state == fold(sink.events)

    assert (state.search, state.status) == (search, "failed" if result.failed else "finished")
    assert state.final_hash == result.final["workflow_hash"]
    assert state.usage.to_dict() == result.usage
    assert runs, "the search ran no workflow"
    for run in runs:  # a probe's own usage is its model calls; its result reports the search's shared budget
        folded = state.probes[run.run_id].summary()
        assert {**folded, "usage": None} == {**run.summary(), "usage": None}
    judged = [json.loads(path.read_text()).get("J") for path in (tmp_path / "run").rglob(JUDGEMENT_FILE)]
    assert sorted(p.J for p in state.scores if p.J is not None) == sorted(j for j in judged if j is not None)
    assert state.last_seq == sink.events[-1].seq
