"""The run page's evidence graph on the studio's side (webapp/runs/evidence.py, views, live.py):
the panel's JSON built from the run's graph file (or its Event rows when the file is gone), a
record's versions and provenance, and people's records added from the studio, which land in the
graph and people.jsonl, reach the next planner's memory, and are refused (writing nothing) for
a viewer or bad input. The graph is written by the engine's own memory code (SharedMemory,
TeamMemory) through the studio's RunEventSink, as a worker would; no worker or Redis needed."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from engine.evidence.memory import EVIDENCE_FILE, PEOPLE_TRACE, SharedMemory, TeamMemory
from engine.evidence.sqlite_store import SqliteEvidenceStore
from engine.evidence.graph import Author
from engine.harness import MemoryPolicy
from engine.limits import MAX_NOTE_CHARS
from engine.protocol.events import AgentFinished, EvidenceRecorded
from engine.trace import Tracer
from tests.studio_harness import add_member, running_run
from webapp.runs import live
from webapp.runs.bridge import RunEventSink
from webapp.runs.forms import NewRunForm
from webapp.runs.models import Event, Run

pytestmark = pytest.mark.django_db(transaction=True)


class Graph:
    """A run whose search wrote its evidence graph like SciMARS + Memory does: two probes on their
    own branches (one selected, one rejected), every record traced to the studio's Event rows."""

    def __init__(self, run: Run):
        self.run = run
        self.path = Path(run.run_dir) / EVIDENCE_FILE
        self.sink = RunEventSink(run, "L")
        self.shared = SharedMemory(self.path, Tracer(Path(run.run_dir).name, [self.sink]), share=True)
        self.ids: dict[str, int] = {}
        for branch, score in (("001-r1-reference", "0.031"), ("002-r1-role_editor", "0.2")):
            tracer = Tracer(branch, [self.sink])
            tracer.iteration = 1
            team = TeamMemory(self.shared.scope(branch), MemoryPolicy(), tracer, branch, iteration=1)
            ran = tracer.emit(AgentFinished(status="SUCCESS", message="ran the program", outputs={}), "coder")
            execution = team.measure("execution", f"candidate ran on {branch}: exit 0", event_seq=ran.seq,
                                     artifact_sha256="ab" * 32)
            check = team.measure("check_result", f"SCORE relative_l2 = {score} on {branch}",
                                 links=(("derived_from", execution.id),), event_seq=ran.seq)
            self.ids[branch] = execution.id
            self.ids[branch + ":check"] = check.id
        self.shared.settle(["001-r1-reference"], ["002-r1-role_editor"], n=1)
        # a revised record: version 2 supersedes version 1 in the same lineage
        first = self.shared.store.get(self.ids["001-r1-reference:check"])
        self.revised = self.shared.store.revise(first.id, first.text + " (recomputed on both folds)",
                                                Author(agent="trellis", role="validation"))
        self.shared.tracer.emit(EvidenceRecorded(record=self.revised.to_dict()), "trellis")

    def planner_memory(self, branch: str = "003-r2-reference") -> list:
        """What a later probe's planner is given at its step (its subscriptions push notes)."""
        tracer = Tracer(branch, [self.sink])
        team = TeamMemory(self.shared.scope(branch), MemoryPolicy(), tracer, branch, iteration=2)
        return team.recall("planner", "planner")

    def close(self) -> None:
        self.shared.close()


@pytest.fixture
def graph(light_task, tmp_path):
    run = running_run(light_task, "Evidence")
    Run.objects.filter(pk=run.pk).update(run_dir=str(tmp_path / "run"), search="scimars", memory=True)
    run.refresh_from_db()
    g = Graph(run)
    yield g
    g.close()


def _client(run: Run, username: str, role: str) -> Client:
    user = get_user_model().objects.create_user(username, password="pw-" + username)
    add_member(run.task.project, user, role)
    c = Client()
    c.force_login(user)
    return c


def _records(path: Path) -> list[dict]:
    store = SqliteEvidenceStore(path)
    try:
        return store.export()["records"]
    finally:
        store.close()


def test_evidence_json_shows_every_record_with_its_branch_provenance_and_links(graph):
    client = _client(graph.run, "vera", "viewer")
    state = client.get(f"/runs/{graph.run.pk}/evidence.json").json()
    stored = _records(graph.path)
    assert state["source"] == "graph"
    assert [r["id"] for r in state["records"]] == [r["id"] for r in stored] and len(stored) == 5
    assert state["branches"] == {"001-r1-reference": "selected", "002-r1-role_editor": "rejected"}
    by_id = {r["id"]: r for r in state["records"]}
    execution = by_id[graph.ids["001-r1-reference"]]
    # provenance resolves to the studio's Event row of the probe's event, and to its artifact
    row = Event.objects.get(run=graph.run, seq=execution["event"])
    assert (row.source, row.kind) == ("001-r1-reference", "agent_finished")
    assert execution["artifact"] == f"/runs/{graph.run.pk}/artifacts/{'ab' * 32}"
    assert {"source": graph.ids["002-r1-role_editor:check"], "target": graph.ids["002-r1-role_editor"],
            "type": "derived_from"} in state["links"]
    assert {"source": graph.revised.id, "target": graph.ids["001-r1-reference:check"], "type": "supersedes"} in state["links"]
    assert execution["author_label"] == "trellis (validation)"
    assert not state["can_write"]
    page = client.get(f"/runs/{graph.run.pk}/").content.decode()
    assert 'id="evidence-panel"' in page and 'id="ev-form"' not in page  # a viewer's panel has no form
    assert 'id="ev-form"' in _client(graph.run, "rosa", "reviewer").get(f"/runs/{graph.run.pk}/").content.decode()


def test_without_the_graph_file_the_panel_is_rebuilt_from_the_event_rows(graph):
    client = _client(graph.run, "vera", "viewer")
    from_file = client.get(f"/runs/{graph.run.pk}/evidence.json").json()
    graph.close()
    shutil.move(graph.path, graph.path.with_suffix(".moved"))
    for suffix in ("-wal", "-shm"):
        Path(str(graph.path) + suffix).unlink(missing_ok=True)
    from_trace = client.get(f"/runs/{graph.run.pk}/evidence.json").json()
    assert from_trace["source"] == "trace"
    assert from_trace["records"] == from_file["records"]
    assert sorted(map(json.dumps, from_trace["links"])) == sorted(map(json.dumps, from_file["links"]))
    assert from_trace["branches"] == from_file["branches"]
    detail = client.get(f"/runs/{graph.run.pk}/evidence/{graph.revised.id}.json").json()
    assert [v["version"] for v in detail["history"]] == [1, 2] and detail["text"].endswith("both folds)")
    assert not graph.path.exists()  # reading never creates a graph


def test_a_record_shows_its_whole_text_versions_and_where_it_came_from(graph):
    client = _client(graph.run, "vera", "viewer")
    detail = client.get(f"/runs/{graph.run.pk}/evidence/{graph.revised.id}.json").json()
    assert detail["text"].endswith("(recomputed on both folds)") and detail["version"] == 2
    assert [v["version"] for v in detail["history"]] == [1, 2]
    # a revision stays on its lineage's branch
    assert (detail["status"], detail["branch"]) == ("selected", "001-r1-reference")
    assert detail["author_label"] == "trellis (validation)"
    old = client.get(f"/runs/{graph.run.pk}/evidence/{graph.ids['002-r1-role_editor:check']}.json").json()
    assert old["status"] == "rejected" and old["branch"] == "002-r1-role_editor"
    assert [(l["type"], l["direction"], l["other"]["kind"]) for l in old["links"]] == [("derived_from", "out", "execution")]
    event = client.get(f"/runs/{graph.run.pk}/events/{old['event']}")
    assert old["event_kind"] == "agent_finished"
    assert event.status_code == 200 and "ran the program" in event.content.decode()
    assert client.get(f"/runs/{graph.run.pk}/evidence/999.json").status_code == 404


def test_a_reviewers_note_lands_in_the_graph_and_people_jsonl_and_reaches_the_next_planner(graph):
    client = _client(graph.run, "rosa", "reviewer")
    target = graph.ids["001-r1-reference"]
    answer = client.post(f"/runs/{graph.run.pk}/evidence/records",
                         {"kind": "note", "text": "  try a piecewise fit: the data jumps near x = 0.4 ",
                          "link": [f"supports:{target}"]})
    assert answer.status_code == 201, answer.content
    record = answer.json()["record"]
    stored = {r["id"]: r for r in _records(graph.path)}[record["id"]]
    assert stored["text"] == "try a piecewise fit: the data jumps near x = 0.4"
    assert stored["author"]["person"] == "user:rosa" and stored["branch"] is None and stored["kind"] == "note"
    assert answer.json()["links"] == [{"source": record["id"], "target": target, "type": "supports"}]
    people = [json.loads(line) for line in (Path(graph.run.run_dir) / PEOPLE_TRACE).read_text().splitlines()]
    assert [(p["kind"], p["agent"], p["payload"]["record"]["id"]) for p in people] == [
        ("evidence_recorded", "user:rosa", record["id"])]
    assert people[0]["payload"]["links"] == [{"type": "supports", "target": target}]
    # the next probe's planner subscribes to notes: the note is pushed into its memory
    assert record["id"] in [r.id for r in graph.planner_memory()]
    retrieval = Event.objects.filter(run=graph.run, kind="memory_retrieval").last()
    assert record["id"] in retrieval.payload["pushed"]
    # and the panel shows who was given it
    state = _client(graph.run, "vera", "viewer").get(f"/runs/{graph.run.pk}/evidence.json").json()
    assert state["given"][str(record["id"])][0]["role"] == "planner"


def test_an_annotator_may_write_a_viewer_may_not_and_nothing_is_written(graph):
    before = len(_records(graph.path))
    viewer = _client(graph.run, "vera", "viewer")
    refused = viewer.post(f"/runs/{graph.run.pk}/evidence/records", {"kind": "note", "text": "let me in"})
    assert refused.status_code == 403
    assert len(_records(graph.path)) == before and not (Path(graph.run.run_dir) / PEOPLE_TRACE).exists()
    outsider = Client()
    outsider.force_login(get_user_model().objects.create_user("otto", password="pw-otto"))
    assert outsider.post(f"/runs/{graph.run.pk}/evidence/records", {"kind": "note", "text": "x"}).status_code == 404
    assert outsider.get(f"/runs/{graph.run.pk}/evidence.json").status_code == 404
    annotator = _client(graph.run, "anna", "annotator")
    ok = annotator.post(f"/runs/{graph.run.pk}/evidence/records", {"kind": "question", "text": "why two folds?"})
    assert ok.status_code == 201 and len(_records(graph.path)) == before + 1


@pytest.mark.parametrize("fields, says", [
    ({"kind": "note", "text": "see #999", "link": ["supports:999"]}, "no record 999"),
    ({"kind": "note", "text": "x", "link": ["proves:1"]}, "unknown link type 'proves'"),
    ({"kind": "note", "text": "x", "link": ["supports"]}, "type:record_id"),
    ({"kind": "plan", "text": "do it my way"}, "not 'plan'"),
    ({"kind": "note", "text": "   "}, "write the note's text"),
    ({"kind": "hypothesis", "text": "y" * (MAX_NOTE_CHARS + 1)}, f"at most {MAX_NOTE_CHARS:,} characters"),
])
def test_bad_input_gets_a_clear_error_and_writes_nothing(graph, fields, says):
    client = _client(graph.run, "rosa", "reviewer")
    before = _records(graph.path)
    answer = client.post(f"/runs/{graph.run.pk}/evidence/records", fields)
    assert answer.status_code == 400
    assert says in answer.json()["error"]
    assert _records(graph.path) == before and not (Path(graph.run.run_dir) / PEOPLE_TRACE).exists()


def test_live_messages_carry_a_preview_of_the_text_and_the_provenance_event(graph):
    row = Event.objects.filter(run=graph.run, kind="evidence_recorded").order_by("seq")[1]
    message = live.stored_message(row)
    record = message["data"]["record"]
    assert record["preview"].startswith("SCORE relative_l2 = 0.031") and "text" not in record
    assert record["event"] == Event.objects.get(run=graph.run, source="001-r1-reference", source_seq=1).seq
    assert message["data"]["links"] == [{"source": record["id"], "target": graph.ids["001-r1-reference"],
                                         "type": "derived_from"}]
    long = graph.shared.store.add("observation", "z" * 5000, Author(agent="analyzer", role="analyzer"))
    from engine.trace import Event as EngineEvent

    shaped = live.event_message(graph.run.pk, 99, EngineEvent("p", 9, 1.0, "evidence_recorded", "analyzer", 1,
                                                               EvidenceRecorded(record=long.to_dict()).to_payload()))
    assert len(shaped["data"]["record"]["preview"]) <= 301


def test_the_new_run_form_takes_shared_memory_for_scimars_only(examples):
    base = {"project": "P", "task_folder": str(examples / "discontinuous-1d"), "iterations": 1,
            "gate_policy": "automatic", "seed": 0, "max_tokens": 100000}
    mimosa = NewRunForm({**base, "search": "mimosa", "memory": "on"})
    assert not mimosa.is_valid() and "Shared memory is for" in mimosa.errors["memory"][0]
    assert not NewRunForm({**base, "search": "tree", "memory": "on"}).is_valid()
    scimars = NewRunForm({**base, "search": "scimars", "memory": "on"})
    assert scimars.is_valid(), scimars.errors
    assert scimars.run_options()["memory"] is True
    fixed = NewRunForm({**base, "search": "memory-fixed"})
    assert fixed.is_valid() and fixed.run_options()["memory"] is True  # it always shares
    plain = NewRunForm({**base, "search": "mimosa"})
    assert plain.is_valid() and plain.run_options()["memory"] is False
