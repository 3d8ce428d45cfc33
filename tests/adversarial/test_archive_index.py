"""The archive's vector index never disagrees with its entry files, which stay the truth: an entry
damaged, replaced or removed after it was indexed, one copied in by hand, one added by another
process, and the index file itself deleted or garbage; the lookup still picks what a scan of the
files would pick, and reads only the winner."""
import hashlib
import math
import warnings

import pytest

from engine.archive import ArchiveWarning, WorkflowArchive
from engine.synthesis import team_workflow
from engine.task import load_task


class WordsEmbedder:
    name = "words-test"

    def embed(self, text: str) -> list[float]:
        v = [0.0] * 64
        for w in text.lower().split():
            v[int(hashlib.sha256(w.encode()).hexdigest(), 16) % 64] += 1.0
        n = math.sqrt(sum(x * x for x in v)) or 1.0
        return [x / n for x in v]


@pytest.fixture
def tasks(examples):
    return {n: load_task(examples / n) for n in ("discontinuous-1d", "diabetes-progression", "wine-cultivar")}


def _fill(root, tasks):
    archive = WorkflowArchive(root, WordsEmbedder())
    added = {n: archive.add(t, team_workflow(t), {"ok": True, "value": 0.5, "higher_is_better": True}, "mimosa")
             for n, t in tasks.items()}
    return archive, added


def test_a_damaged_or_removed_entry_gives_way_to_the_next(tmp_path, tasks):
    archive, added = _fill(tmp_path, tasks)
    entry, sim = archive.nearest(tasks["wine-cultivar"])
    assert entry.id == added["wine-cultivar"].id and sim == pytest.approx(1.0)
    path = tmp_path / "entries" / f"{entry.id}.json"
    path.write_text("{ not json")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        entry2, _ = archive.nearest(tasks["wine-cultivar"])
    assert entry2 is not None and entry2.id != added["wine-cultivar"].id
    assert any(issubclass(w.category, ArchiveWarning) for w in caught)
    path.unlink()
    assert archive.nearest(tasks["wine-cultivar"])[0].id == entry2.id


def test_an_entry_added_by_another_process_or_copied_in_is_seen(tmp_path, tasks):
    first = WorkflowArchive(tmp_path, WordsEmbedder())
    one = {"discontinuous-1d": tasks["discontinuous-1d"]}
    _fill(tmp_path, one)
    assert first.nearest(tasks["wine-cultivar"])[0].task_name == "discontinuous-1d"
    other = WorkflowArchive(tmp_path, WordsEmbedder())  # another process's archive object
    wine = other.add(tasks["wine-cultivar"], team_workflow(tasks["wine-cultivar"]), None, "mimosa")
    assert first.nearest(tasks["wine-cultivar"])[0].id == wine.id
    copied = tmp_path / "elsewhere"
    _, added = _fill(copied, {"diabetes-progression": tasks["diabetes-progression"]})
    name = f"{added['diabetes-progression'].id}.json"
    (tmp_path / "entries" / name).write_bytes((copied / "entries" / name).read_bytes())
    assert first.nearest(tasks["diabetes-progression"])[0].id == added["diabetes-progression"].id


def test_the_index_file_deleted_or_garbage_is_rebuilt_from_the_entries(tmp_path, tasks):
    archive, added = _fill(tmp_path, tasks)
    assert archive.nearest(tasks["diabetes-progression"])[0].id == added["diabetes-progression"].id
    fresh = WorkflowArchive(tmp_path, WordsEmbedder())
    (tmp_path / "vectors.sqlite").unlink()
    assert fresh.nearest(tasks["diabetes-progression"])[0].id == added["diabetes-progression"].id
    garbage = WorkflowArchive(tmp_path, WordsEmbedder())
    (tmp_path / "vectors.sqlite").write_bytes(b"not a database at all" * 100)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        entry, _ = garbage.nearest(tasks["diabetes-progression"])
    assert entry.id == added["diabetes-progression"].id
    assert any("was damaged" in str(w.message) and "rebuilt" in str(w.message) for w in caught)
    assert list(tmp_path.glob("vectors.sqlite.damaged-*"))  # kept aside, not deleted
    assert garbage.nearest(tasks["wine-cultivar"])[0].id == added["wine-cultivar"].id  # the new index serves


def test_the_same_task_archived_twice_goes_to_the_better_metric_then_the_newer(tmp_path, tasks):
    t = tasks["wine-cultivar"]
    archive = WorkflowArchive(tmp_path, WordsEmbedder())
    worse = archive.add(t, team_workflow(t), {"ok": True, "value": 0.7, "higher_is_better": True}, "mimosa")
    better = archive.add(t, team_workflow(t), {"ok": True, "value": 0.9, "higher_is_better": True}, "mimosa")
    newer_worse = archive.add(t, team_workflow(t), {"ok": True, "value": 0.8, "higher_is_better": True}, "mimosa")
    assert archive.nearest(t)[0].id == better.id
    assert archive._nearest_by_scan(t)[0].id == better.id and {worse.id, newer_worse.id}


def test_an_index_written_before_texts_were_hashed_is_upgraded(tmp_path, tasks):
    """vectors.sqlite from before the text hash (its files table without the column): the next
    lookup adds it, and a task searched again is found by its text without the embedder."""
    import sqlite3

    from engine.archive_index import text_hash

    archive, added = _fill(tmp_path, tasks)
    archive.nearest(tasks["wine-cultivar"])
    archive._index().close()
    db = sqlite3.connect(tmp_path / "vectors.sqlite")
    db.executescript("DROP INDEX files_by_text_hash; ALTER TABLE files DROP COLUMN text_hash;")
    db.close()

    class Refusing(WordsEmbedder):
        def embed(self, text):
            raise AssertionError("a task archived before is looked up without the embedding model")

    entry, similarity = WorkflowArchive(tmp_path, Refusing()).nearest(tasks["wine-cultivar"])
    assert entry.id == added["wine-cultivar"].id and similarity == pytest.approx(1.0)
    db = sqlite3.connect(tmp_path / "vectors.sqlite")
    hashes = dict(db.execute("SELECT id, text_hash FROM files"))
    db.close()
    assert hashes[added["diabetes-progression"].id] == text_hash(added["diabetes-progression"].task_text)
