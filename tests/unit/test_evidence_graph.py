"""The evidence graph's embedded store (engine/evidence, issue 12): records with authors,
provenance and versions, typed links, retrieval by kind, author, role, tag, text and recency,
and a database that refuses to rewrite what was recorded."""
import sqlite3

import pytest

from engine.evidence import Author, EvidenceError, Provenance, Query, SqliteEvidenceStore

VERIFIER = Author(agent="verifier", role="verifier")
PLANNER = Author(agent="planner", role="planner")
ADA = Author(person="user:ada")


@pytest.fixture
def store(tmp_path):
    s = SqliteEvidenceStore(tmp_path / "evidence.sqlite")
    yield s
    s.close()


def test_the_planner_finds_the_verifiers_failed_shape_check_with_its_provenance(store):
    failed = store.add("check_result", "output_schema failed: predictions have shape (20, 1), expected (20,)",
                       VERIFIER, tags=["failed", "output_schema"], iteration=1,
                       provenance=Provenance(run_id="r1", event_seq=41, execution_sha256="ab" * 32))
    store.add("observation", "the target jumps near x = 0.3", Author(agent="analyzer", role="analyzer"), iteration=1)
    found = store.search(Query(kinds=("check_result",), tag="failed", text="shape of the predictions"))
    assert [r.id for r in found] == [failed.id]
    assert found[0].provenance.event_seq == 41 and found[0].provenance.execution_sha256 == "ab" * 32
    assert found[0].author.describe() == "verifier" and found[0].tags == ("failed", "output_schema")


def test_retrieval_by_author_role_person_tag_iteration_and_recency(store):
    a = store.add("plan", "use a spline", PLANNER, iteration=1)
    b = store.add("note", "try a piecewise fit instead", ADA, iteration=2, tags=["human"])
    c = store.add("plan", "use a piecewise fit", PLANNER, iteration=2, links=[("derived_from", b.id)])
    assert [r.id for r in store.search(Query(role="planner"))] == [c.id, a.id]  # newest first
    assert [r.id for r in store.search(Query(person="user:ada"))] == [b.id]
    assert [r.id for r in store.search(Query(tag="human"))] == [b.id]
    assert [r.id for r in store.search(Query(since_iteration=2))] == [c.id, b.id]
    assert [r.id for r in store.search(Query(limit=1))] == [c.id]
    assert [(link.source, link.target, link.type) for link in store.links(b.id)] == [(c.id, b.id, "derived_from")]


def test_a_revision_supersedes_without_rewriting_and_history_keeps_every_version(store):
    first = store.add("hypothesis", "the noise is multiplicative", PLANNER)
    second = store.revise(first.id, "the noise is additive below x = 1 and multiplicative above", ADA)
    assert (second.lineage, second.version) == (first.id, 2)
    assert [r.text for r in store.history(first.id)] == [first.text, second.text]
    assert [r.id for r in store.search(Query(kinds=("hypothesis",)))] == [second.id]  # the current version only
    assert {r.id for r in store.search(Query(kinds=("hypothesis",), history=True))} == {first.id, second.id}
    assert (second.id, first.id, "supersedes") in {(k.source, k.target, k.type) for k in store.links(first.id)}
    with pytest.raises(EvidenceError, match="revise the newest version"):
        store.revise(first.id, "a fork of an old version", PLANNER)


def test_the_database_refuses_to_update_or_delete_any_record_tag_or_link(store, tmp_path):
    r = store.add("finding", "r2 0.41 on the held-out folds", VERIFIER, tags=["score"])
    store.link(store.add("lesson", "validate by group", PLANNER).id, r.id, "derived_from", PLANNER)
    raw = sqlite3.connect(tmp_path / "evidence.sqlite")  # any connection, not only the store's API
    for sql in ("UPDATE records SET text = 'r2 0.95' WHERE id = 1", "DELETE FROM records WHERE id = 1",
                "UPDATE tags SET tag = 'x'", "DELETE FROM tags", "DELETE FROM links", "UPDATE links SET type = 'supports'"):
        with pytest.raises(sqlite3.DatabaseError, match="append-only"):
            raw.execute(sql)
    raw.close()
    assert store.get(r.id).text == "r2 0.41 on the held-out folds"


def test_bad_records_and_links_are_refused_with_a_clear_error(store):
    with pytest.raises(EvidenceError, match="unknown record kind 'opinion'"):
        store.add("opinion", "x", PLANNER)
    with pytest.raises(EvidenceError, match="needs text"):
        store.add("note", "  ", ADA)
    with pytest.raises(EvidenceError, match="one word"):
        store.add("note", "x", ADA, tags=["two words"])
    with pytest.raises(EvidenceError, match="either an agent"):
        Author(agent="planner", person="user:ada")
    r = store.add("note", "x", ADA)
    with pytest.raises(EvidenceError, match="unknown link type 'likes'"):
        store.link(r.id, r.id, "likes", ADA)
    with pytest.raises(EvidenceError, match="no such record"):
        store.link(r.id, 999, "supports", ADA)
    with pytest.raises(EvidenceError, match="itself"):
        store.link(r.id, r.id, "supports", ADA)
    assert store.count() == 1  # nothing half-written by the refused calls


def test_text_search_takes_any_words_and_no_query_syntax(store):
    store.add("note", 'quotes " and NEAR( and * are just text', ADA)
    assert len(store.search(Query(text='NEAR( "unbalanced * OR'))) == 1
    assert store.search(Query(text="nothing matches this")) == []


def test_branch_writes_stay_apart_until_asked_for(store):
    trunk = store.add("observation", "shared before the round", VERIFIER)
    a = store.add("plan", "branch a's plan", PLANNER, branch="a")
    store.add("plan", "branch b's plan", PLANNER, branch="b")
    assert [r.id for r in store.search(Query(branches=(None, "a")))] == [a.id, trunk.id]
    assert [r.id for r in store.search(Query(branches=(None,)))] == [trunk.id]
    assert store.count() == 3


def test_records_holding_every_word_come_before_those_holding_some(store):
    some = store.add("note", "the residual plot looks fine", ADA)
    every = store.add("finding", "a residual shape mismatch in fold 3", VERIFIER)
    store.add("note", "unrelated words only", ADA)
    for i in range(30):  # newer partial matches do not push the full match out
        store.add("observation", f"shape of batch {i}", VERIFIER)
    found = store.search(Query(text="residual shape mismatch", limit=5))
    assert found[0].id == every.id and some.id not in [r.id for r in found[:1]]
    assert len(found) == 5


def test_a_graph_opened_read_only_reads_everything_and_writes_nothing(tmp_path):
    from engine.evidence import Author, EvidenceError, Query, SqliteEvidenceStore

    with pytest.raises(EvidenceError, match="no evidence graph"):
        SqliteEvidenceStore(tmp_path / "missing.sqlite", readonly=True)
    assert not (tmp_path / "missing.sqlite").exists()
    store = SqliteEvidenceStore(tmp_path / "g.sqlite")
    first = store.add("note", "the jump sits near x = 0.3", Author(person="user:ada"))
    reader = SqliteEvidenceStore(tmp_path / "g.sqlite", readonly=True)
    assert [r.id for r in reader.search(Query(text="jump"))] == [first.id]
    with pytest.raises(Exception, match="readonly|read-only"):
        reader.add("note", "sneaked in", Author(person="user:eve"))
    assert store.count() == 1
