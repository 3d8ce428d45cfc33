"""The memory policy acts: what a role's policy retrieves enters its prompt (traced as
``memory_retrieval``), what its duties name is recorded, and the offline planner revises its
plan from the verifier's failed check instead of repeating it."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.budget import Budget
from engine.evidence import Query, SqliteEvidenceStore
from engine.mutations import Mutation
from engine.prompt_format import extract_strategy
from engine.runner import RunConfig, run_workflow
from engine.synthesis import team_workflow
from engine.task import load_task
from engine.trace import read_events
from tests.fakes import FakeExecutor, Outcome

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "discontinuous-1d"


def bad_schema_once():
    """The first solution program writes a predictions file without the target column."""
    left = [1]

    def script(code: str) -> Outcome | None:
        if "strategy:" in code and left[0]:
            left[0] -= 1
            return Outcome("ok", stdout="done\n", files=(("predictions.csv", "id,wrong\n0,1.0\n"),))
        return None
    return script


def retry_to_planner(policy_change: dict | None = None):
    """The team, with a failed verification sent back to the planner (not the debugger)."""
    wf = team_workflow(load_task(EXAMPLE))
    wf = Mutation("route_change", "verifier", {"on": "RETRY", "target": "planner", "max_loops": 1}).apply(wf)
    if policy_change:
        wf = Mutation("memory_policy_change", "memory", policy_change).apply(wf)
    return wf


def run(tmp_path: Path, wf, name: str):
    task = load_task(EXAMPLE)
    result = run_workflow(task, wf, RunConfig(run_dir=tmp_path / name, budget=Budget(max_tokens=400_000),
                                              scoring="validation"),
                          executor=FakeExecutor(tmp_path / f"{name}-sandbox", script=bad_schema_once()))
    events = list(read_events(Path(result.trace_path)))
    return result, events


def planner_steps(events) -> list[dict]:
    """Each planner step: what memory gave it and the plan it handed on."""
    steps, given = [], None
    for e in events:
        if e.kind == "memory_retrieval" and e.payload["role"] == "planner":
            given = e.payload
        if e.kind == "model_call" and e.agent == "planner":
            steps.append({"given": given, "plan": e.payload["response"],
                          "prompt": e.payload["messages"][-1]["content"]})
            given = None
    return steps


def test_the_planner_retrieves_the_verifiers_failed_schema_check_and_revises_the_plan(tmp_path):
    result, events = run(tmp_path, retry_to_planner(), "memory")
    first, second = planner_steps(events)
    failed = [e.payload["record"] for e in events if e.kind == "evidence_recorded"
              and e.payload["record"]["kind"] == "check_result" and "output_schema" in e.payload["record"]["tags"]]
    assert failed, "the verifier recorded no failed schema check"
    record = failed[0]
    # linked to the execution it judged, authored by the verifier, with the check event as provenance
    execution = next(e.payload for e in events if e.kind == "evidence_recorded"
                     and e.payload["record"]["kind"] == "execution")
    assert record["author"]["role"] == "verifier"
    assert {"type": "derived_from", "target": execution["record"]["id"]} in next(
        e.payload["links"] for e in events if e.kind == "evidence_recorded" and e.payload["record"]["id"] == record["id"])
    assert record["provenance"]["event_seq"] == next(e.seq for e in events if e.kind == "check"
                                                     and e.payload["name"] == "output_schema")
    # the planner's second step was given that record, and changed approach because of it
    assert record["id"] in second["given"]["records"]
    before, after = extract_strategy(first["plan"])[0], extract_strategy(second["plan"])[0]
    assert after != before
    assert f"avoided {before}" in second["plan"] and f"#{record['id']}" in second["plan"]
    assert result.status == "completed"


def test_two_memory_policies_give_different_prompts_and_outcomes(tmp_path):
    _, with_memory = run(tmp_path, retry_to_planner(), "on")
    _, without = run(tmp_path, retry_to_planner({"role": "planner", "retrieves": [], "subscribes": []}), "off")
    on_steps, off_steps = planner_steps(with_memory), planner_steps(without)
    assert len(on_steps) == len(off_steps) == 2
    assert on_steps[0]["prompt"] == off_steps[0]["prompt"]  # nothing to remember yet
    assert "## Input: memory" in on_steps[1]["prompt"] and "## Input: memory" not in off_steps[1]["prompt"]
    assert not [e for e in without if e.kind == "memory_retrieval" and e.payload["role"] == "planner"]
    on, off = on_steps[1]["plan"], off_steps[1]["plan"]
    assert "**Memory.**" in on and "**Memory.**" not in off
    assert extract_strategy(on) != extract_strategy(off)


def test_recording_duties_decide_what_is_written_and_the_graph_is_in_the_run_folder(tmp_path):
    wf = retry_to_planner({"role": "verifier", "records": ["execution"]})
    result, events = run(tmp_path, wf, "duties")
    kinds = [e.payload["record"]["kind"] for e in events if e.kind == "evidence_recorded"]
    authored = {(e.payload["record"]["author"]["role"], e.payload["record"]["kind"]) for e in events
                if e.kind == "evidence_recorded"}
    assert ("verifier", "check_result") not in authored and ("verifier", "execution") in authored
    assert {"observation", "plan", "execution"} <= set(kinds)
    store = SqliteEvidenceStore(Path(result.trace_path).parent / "evidence.sqlite")
    assert [r.kind for r in store.search(Query(limit=100))][::-1] == kinds


def test_a_persons_note_reaches_the_planner_and_steers_its_plan(tmp_path):
    from engine.evidence.memory import MemoryScope, add_person_record
    from engine.offline.strategies import strategies_for

    diabetes = load_task(EXAMPLE.parent / "diabetes-progression")

    def plan(name: str, note: str | None) -> tuple[str, list]:
        folder = tmp_path / name
        if note:
            add_person_record(folder, "user:ada", "note", note)
        store = SqliteEvidenceStore(folder / "evidence.sqlite")
        result = run_workflow(diabetes, team_workflow(diabetes), RunConfig(
            run_dir=folder / "probe", scoring="validation",
            memory=MemoryScope(store, branch="001-probe", visible=(None, "001-probe"))),
            executor=FakeExecutor(tmp_path / f"{name}-sandbox"))
        events = list(read_events(Path(result.trace_path)))
        return planner_steps(events)[0], events

    step, events = plan("noted", "Prefer a regularised linear model: ten features and 300 rows, keep it interpretable.")
    note = next(e.payload["record"] for e in read_events(tmp_path / "noted" / "people.jsonl"))
    assert note["author"] == {"agent": None, "role": None, "person": "user:ada"} and note["branch"] is None
    assert step["given"]["pushed"] == [note["id"]]
    assert "keep it interpretable" in step["prompt"]
    chosen = extract_strategy(step["plan"])[0]
    asked = {s.key for s in strategies_for("tabular_regression") if s.tags & {"linear", "regularised", "interpretable"}}
    assert chosen in asked and f"#{note['id']}" in step["plan"] and "notes ask for" in step["plan"]
    plain, _ = plan("plain", None)
    assert plain["given"]["pushed"] == [] and extract_strategy(plain["plan"])[0] != chosen
