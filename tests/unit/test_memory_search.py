"""SciMARS + Memory and the fixed-memory control, with the sandbox faked: one evidence graph per
search, each probe writing on its own branch and reading only the trunk and the selected
branches; reuse receipts in a real round that reflection is told about; a control that never
edits its harness; and a graph that rebuilds from the traces alone."""
from __future__ import annotations

import io
import sqlite3
from pathlib import Path

import pytest

from engine.evidence import Author, EvidenceError, Query, SqliteEvidenceStore
from engine.evidence.rebuild import rebuild_run, run_traces, same_graph
from engine.evolve import evolve
from engine.run_spec import RunSpec
from engine.mutations import Mutation, MutationError
from engine.synthesis import team_workflow
from engine.task import load_task
from engine.trace import read_events
from tests.fakes import FakeExecutor

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DIABETES = EXAMPLES / "diabetes-progression"


def events_of(run_dir: Path) -> list:
    return [e for trace in run_traces(run_dir) for e in read_events(trace)]


@pytest.fixture(scope="module")
def scimars_memory(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("scimars-memory")
    result = evolve(DIABETES,
                    RunSpec(search="scimars", iterations=2, seed=2, max_tokens=3_000_000, single_agent=False,
                            memory=True),
                    run_dir=tmp / "run", out=io.StringIO(), executor=FakeExecutor(tmp / "sandbox"))
    return result, events_of(result.run_dir)


def test_probes_share_one_graph_and_read_only_the_trunk_and_selected_branches(scimars_memory):
    result, events = scimars_memory
    store = SqliteEvidenceStore(result.run_dir / "evidence.sqlite")
    assert store.count() > 0 and not list((result.run_dir / "probes").glob("*/evidence.sqlite"))
    branch_of = {r.id: r.branch for r in store.search(Query(limit=1000, history=True))}
    status = store.branch_status()
    assert set(status.values()) == {"selected", "rejected"}
    settled = [e.payload for e in events if e.kind == "evidence_branch"]
    assert {(p["branch"], p["status"]) for p in settled} == set(status.items())
    # each round keeps at most one new branch (none when it kept a reference reused from before)
    for n in {p["n"] for p in settled}:
        assert sum(p["status"] == "selected" for p in settled if p["n"] == n) <= 1
    for e in events:
        if e.kind != "memory_retrieval":
            continue
        own = e.payload["branch"]
        for rid in e.payload["records"] + e.payload["pushed"]:
            seen = branch_of[rid]
            # a probe never sees another probe's writes unless that branch was selected earlier
            assert seen in (None, own) or status.get(seen) == "selected", (own, rid, seen)
            assert seen == own or status.get(seen) != "rejected"
    # records written by every probe carry its branch, authored by agents of that probe
    written = [e for e in events if e.kind == "evidence_recorded"]
    assert all(e.payload["record"]["branch"] == e.run_id for e in written if e.run_id != result.run_dir.name)


def test_later_rounds_plan_from_earlier_rounds_records(scimars_memory):
    result, events = scimars_memory
    later = [e.payload for e in events if e.kind == "memory_retrieval" and e.payload["role"] == "planner"
             and e.iteration >= 2]
    assert later and any(p["records"] for p in later)
    plans = [e.payload["response"] for e in events if e.kind == "model_call" and e.agent == "planner"
             and e.iteration >= 2]
    assert any("**Memory.**" in p and "already tried" in p for p in plans)


def test_a_reuse_receipt_is_issued_in_a_real_round_and_reaches_reflection(scimars_memory):
    result, events = scimars_memory
    receipts = [e.payload for e in events if e.kind == "reuse_receipt"]
    assert any(r["verified"] and r["label"].endswith("-reference") for r in receipts)
    reused_rounds = {int(r["label"].split("-")[0][1:]) for r in receipts if r["verified"]}
    reflections = {e.payload["n"]: " ".join(e.payload["lessons"]) for e in events if e.kind == "reflection"}
    assert reused_rounds and all("reused" in reflections[n] for n in reused_rounds)
    # a reused execution is not run again: one probe folder per execution that ran
    probes = sorted(p.name for p in (result.run_dir / "probes").iterdir())
    assert not any(p.endswith("-reference") and p.split("-")[1] == "r2" for p in probes)


def test_the_graph_rebuilds_from_the_traces(scimars_memory, tmp_path):
    result, _ = scimars_memory
    rebuilt = rebuild_run(result.run_dir, tmp_path / "rebuilt.sqlite")
    assert same_graph(rebuilt, SqliteEvidenceStore(result.run_dir / "evidence.sqlite"))


def test_the_memory_editor_changes_the_policy_and_never_a_stored_record(scimars_memory, tmp_path):
    result, events = scimars_memory
    proposals = [e.payload for e in events if e.kind == "mutation_proposed" and e.agent == "memory_editor"]
    assert proposals and all(p["mutation"]["kind"] == "memory_policy_change" for p in proposals)
    assert all(set(p["diff"]["memory_changed"]) and not p["diff"]["procedures_changed"] for p in proposals)
    # a proposal that reaches for stored records is refused before anything runs
    wf = team_workflow(load_task(DIABETES))
    for params in ({"role": "planner", "text": "the verifier never failed"}, {"records": [{"id": 1, "text": "x"}]},
                   {"delete": [1]}):
        with pytest.raises(MutationError):
            Mutation("memory_policy_change", "memory", params).apply(wf)
    # and the graph itself refuses to rewrite or drop what was recorded, whatever SQL is sent
    path = tmp_path / "copy.sqlite"
    rebuild_run(result.run_dir, path).close()
    db = sqlite3.connect(path)
    for sql in ("UPDATE records SET text = 'rewritten' WHERE id = 1", "DELETE FROM records WHERE id = 1",
                "UPDATE records SET run_id = 'elsewhere'", "DELETE FROM links", "UPDATE branches SET status = 'selected'"):
        with pytest.raises(sqlite3.DatabaseError, match="append-only"):
            db.execute(sql)
    db.rollback()
    db.close()
    store = SqliteEvidenceStore(path)
    with pytest.raises(EvidenceError):
        store.mark_branch(next(iter(store.branch_status())), "selected")
    assert same_graph(store, SqliteEvidenceStore(result.run_dir / "evidence.sqlite"))


def test_the_fixed_memory_control_never_edits_its_harness(tmp_path):
    out = io.StringIO()
    result = evolve(DIABETES,
                    RunSpec(search="memory-fixed", iterations=2, seed=2, max_tokens=2_000_000, single_agent=False),
                    run_dir=tmp_path / "run", out=out, executor=FakeExecutor(tmp_path / "sandbox"))
    events = events_of(result.run_dir)
    assert result.memory and not [e for e in events if e.kind in {"mutation_proposed", "composition"}]
    started = [e for e in events if e.kind == "run_started"]
    assert len(started) == 3 and len({e.payload["workflow_hash"] for e in started}) == 1
    assert result.initial["workflow_hash"] == result.final["workflow_hash"]
    # every run's records stay: the last run's planner is given records of the runs before it
    store = SqliteEvidenceStore(result.run_dir / "evidence.sqlite")
    assert set(store.branch_status().values()) == {"selected"}
    given = [e for e in events if e.kind == "memory_retrieval" and e.payload["role"] == "planner" and e.iteration == 2]
    earlier = {r.id for r in store.search(Query(limit=1000)) if r.iteration is not None and r.iteration < 2}
    assert given and set(given[0].payload["records"]) & earlier


def test_memory_is_refused_for_a_search_that_keeps_probes_apart(tmp_path):
    with pytest.raises(ValueError, match="shared evidence graph"):
        evolve(DIABETES, RunSpec(search="mimosa", iterations=1, memory=True), run_dir=tmp_path / "run",
               out=io.StringIO(), executor=FakeExecutor(tmp_path / "sandbox"))
