"""The champion bundle of a tree search (engine/bundle/) and the studio's download of it.

One short tree search (fake executor, offline models, real official evaluation after it) writes
the bundle that most tests read; a training-job champion is laid out as the training executor
lays out its jobs (engine/training/jobs.py), so that its checkpoint and curves are bundled."""
from __future__ import annotations

import csv
import hashlib
import io
import json
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.test import Client
from PIL import Image

from engine.bundle import build as bundle_build
from engine.bundle import write_champion_bundle
from engine.evolve import evolve
from engine.run_spec import RunSpec
from engine.sandbox import ExecutionRequest
from engine.search.tree import Node, Tree
from engine.task import load_task
from engine.training.folder import JobFolder, JobState, job_key
from tests.fakes import FakeExecutor
from tests.studio_harness import add_member
from webapp.runs import sharing
from webapp.runs.models import Run, RunStatus
from webapp.tasks.models import Task
from webapp.teams.models import Project

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def search(light_task, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bundle")
    out = io.StringIO()
    result = evolve(light_task, RunSpec(search="tree", iterations=1, seed=0, single_agent=False), run_dir=tmp / "run",
                    out=out, executor=FakeExecutor(tmp / "sandbox"))
    run_dir = tmp / "run"
    return SimpleNamespace(result=result, run_dir=run_dir, folder=run_dir / "champion", out=out.getvalue(),
                           tree=Tree.load(run_dir / "tree" / "tree.json"), task=load_task(light_task))


def committed(result) -> dict:
    """The end the tree search itself committed to, which the bundle is of: the final, or, when a
    trivial baseline beat every node on the search's folds and was handed in instead (the fake's
    straight line loses to the nearest neighbour on this step function), the end it replaced."""
    return result.final.get("searched") or result.final


def _png(path: Path) -> Image.Image:
    assert path.read_bytes()[:8] == PNG_SIGNATURE, path
    with Image.open(path) as img:
        img.verify()  # the whole file decodes: not a truncated or mislabelled one
    img = Image.open(path)
    assert img.format == "PNG" and img.size[0] >= 300 and img.size[1] >= 200
    return img


def _csv(path: Path) -> list[dict]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


# --- the bundle of a real (short) tree search -----------------------------------------------------
def test_a_tree_search_writes_the_bundle_with_every_part(search):
    folder, task = search.folder, search.task
    champion = search.tree.nodes[committed(search.result)["node"]]
    assert f"champion bundle: {folder / 'champion.zip'}" in search.out
    assert (folder / "champion.py").read_text() == champion.code == (search.run_dir / "tree" / "champion.py").read_text()
    # the predictions the official evaluation scored: one per test row
    test_ids = {r["id"] for r in _csv(task.folder / "data" / "test_features.csv")}
    predicted = _csv(folder / "predictions.csv")
    assert {r["id"] for r in predicted} == test_ids and all(r["y"] for r in predicted)
    names = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
    assert {"champion.py", "predictions.csv", "validation_predictions.csv", "report.md", "README.txt", "manifest.json",
            "champion.zip", "plots/prediction_vs_truth_validation.png", "plots/residuals_validation.png",
            "plots/prediction_vs_truth_heldout.png", "plots/residuals_heldout.png",
            "plots/search_progress.png"} == names
    assert not any(p.is_symlink() for p in folder.rglob("*"))


def test_validation_predictions_are_the_folds_training_rows_never_the_heldout_truth(search):
    task, rows = search.task, _csv(search.folder / "validation_predictions.csv")
    train = _csv(task.folder / "data" / "train.csv")
    folds = task.assessment().validation_rows(0, task.assessment().plan())
    assert len(rows) == sum(len(f) for f in folds)  # every validation row of every fold, each once
    assert {int(r["fold"]) for r in rows} == set(range(1, len(folds) + 1))
    for r in rows:
        assert r["truth"] == train[int(r["train_row"])]["y"] and r["x"] == train[int(r["train_row"])]["x"]
        assert float(r["residual"]) == pytest.approx(float(r["prediction"]) - float(r["truth"]))
    heldout = {r["y"] for r in _csv(task.folder / "heldout" / "test_targets.csv")}
    assert not {r["truth"] for r in rows} & heldout


def test_plots_are_png_files_and_say_which_truth_they_use(search):
    plots = search.folder / "plots"
    titles = {p.name: _png(p).info.get("Title", "") for p in plots.glob("*.png")}
    assert "held-out (official)" in titles["prediction_vs_truth_heldout.png"]
    assert "held-out (official)" in titles["residuals_heldout.png"]
    assert "validation" in titles["prediction_vs_truth_validation.png"]
    assert "held-out" not in titles["residuals_validation.png"]
    assert titles["search_progress.png"].startswith("Tree search")


def test_the_report_tells_the_task_champion_lineage_scores_baselines_notes_and_checks(search):
    report = (search.folder / "report.md").read_text()
    tree, result = search.tree, search.result
    champion = tree.nodes[committed(result)["node"]]
    official = committed(result)["official"]
    assert official["ok"] and f"{official['value']:.6g}" in report
    assert f"**{champion.id}**" in report and champion.strategy in report
    for node in tree.lineage(champion):
        assert f"| {node.id} |" in report
    assert f"{champion.score:.6g}" in report
    for name in result.baselines:
        assert name.replace("_", " ") in report
    assert champion.report.strip().splitlines()[0] in report
    for check in champion.checks:
        assert f"`{check['name']}`" in report
    assert "training curves: the champion's program is not a training job" in report


def test_the_zip_holds_every_file_and_a_readme_saying_what_each_is(search):
    folder = search.folder
    with zipfile.ZipFile(folder / "champion.zip") as zf:
        assert zf.testzip() is None
        names = zf.namelist()
        readme = zf.read("README.txt").decode()
        manifest = json.loads(zf.read("manifest.json"))
        for entry in manifest["files"]:
            assert hashlib.sha256(zf.read(entry["name"])).hexdigest() == entry["sha256"]
    on_disk = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()} - {"champion.zip"}
    assert set(names) == on_disk
    for name in names:
        assert name in readme, name
    assert "held-out (official)" in readme and "training curves" in readme  # what is missing, and why


def test_two_inputs_give_a_residual_map_and_labels_a_confusion_matrix(tmp_path):
    from engine.bundle import plots
    from engine.bundle.parts import Pairs

    field = Pairs("in-loop validation folds", features=["x", "t"], ids=["0", "1", "2"], truth=["0.1", "0.5", "0.9"],
                  prediction=["0.1", "0.7", "0.8"], x=[["-1", "0.1"], ["0", "0.5"], ["1", "0.9"]])
    assert plots.residuals(field, tmp_path / "map.png").startswith("Residuals")
    assert _png(tmp_path / "map.png")
    assert field.rows()[1] == {"id": "1", "x": "0", "t": "0.5", "truth": "0.5", "prediction": "0.7",
                               "residual": repr(0.7 - 0.5)}
    labels = Pairs("held-out (official)", ids=["0", "1", "2"], truth=["a", "b", "a"], prediction=["a", "a", "a"])
    assert plots.prediction_vs_truth(labels, tmp_path / "cm.png", "accuracy").startswith("Confusion matrix")
    assert _png(tmp_path / "cm.png").info["Title"] == "Confusion matrix: held-out (official)"
    with pytest.raises(ValueError, match="labels"):
        plots.residuals(labels, tmp_path / "none.png")


# --- a champion that trained -------------------------------------------------------------------
TRAINING_CODE = "import trellis_train as tt\n# a training program: the tree commits to it like any other\n"


def _training_run(tmp_path: Path, task, checkpoint: bytes, points: list[dict]) -> tuple[Path, Tree, Node, str]:
    """A tree run whose champion is a training job, laid out as TrainingExecutor leaves one."""
    run_dir = tmp_path / "run"
    (run_dir / "tree").mkdir(parents=True)
    node = Node(id="n0", parent=None, iteration=0, code=TRAINING_CODE, score=0.2, status="scored",
                report="# data report", strategy="mlp", params={"width": 32})
    tree = Tree(task=task.name, metric="relative_l2", higher_is_better=False, nodes={"n0": node}, next_index=1)
    key = job_key(ExecutionRequest(code=TRAINING_CODE, input_files=task.input_files(), limits=task.resources.limits))
    job = JobFolder(run_dir / "training", key)
    sha = job.store.put_bytes(checkpoint)
    job.save(JobState(key, status="ok", epoch=len(points) - 1, epochs=len(points), best_val=0.1, runs=1,
                      checkpoint={"name": "model.pt", "sha256": sha, "bytes": len(checkpoint), "epoch": len(points) - 1},
                      points=points))
    return run_dir, tree, node, key


POINTS = [{"t": 0.1 * e, "epoch": e, "loss": 1.0 / (e + 1), "val": 1.2 / (e + 1), "lr": 0.01} for e in range(8)]


def test_a_training_champion_brings_its_checkpoint_and_curves(light_task, tmp_path):
    task = load_task(light_task)
    weights = bytes(range(256)) * 64
    run_dir, tree, node, key = _training_run(tmp_path, task, weights, POINTS)
    bundle = write_champion_bundle(task, run_dir, tree, node, predictions=None,
                                   official={"ok": False, "error": "not scored here"}, baselines={})
    folder = bundle.folder
    assert (folder / "checkpoint" / "model.pt").read_bytes() == weights
    curve = _csv(folder / "training_curve.csv")
    assert [int(r["epoch"]) for r in curve] == list(range(8)) and float(curve[-1]["loss"]) == pytest.approx(1 / 8)
    assert _png(folder / "plots" / "training_curves.png").info["Title"].startswith("Training curves")
    report = (folder / "report.md").read_text()
    assert key in report and "8 of 8 epoch(s)" in report
    with zipfile.ZipFile(bundle.zip_path) as zf:
        assert zf.read("checkpoint/model.pt") == weights
        readme = zf.read("README.txt").decode()
    # nothing was kept of the validation folds, and the final commitment delivered nothing: said, not faked
    assert "validation predictions:" in readme and "predictions.csv: the final commitment delivered no" in readme


def test_a_checkpoint_over_the_cap_is_left_out_with_the_reason(light_task, tmp_path, monkeypatch):
    task = load_task(light_task)
    run_dir, tree, node, _ = _training_run(tmp_path, task, b"w" * 4096, POINTS)
    monkeypatch.setattr(bundle_build, "MAX_CHECKPOINT_BYTES", 1024)
    bundle = write_champion_bundle(task, run_dir, tree, node, predictions=None, official={}, baselines={})
    assert not (bundle.folder / "checkpoint").exists()
    why = dict(bundle.missing)["trained checkpoint"]
    assert "left out" in why and "1024" in why
    assert (bundle.folder / "plots" / "training_curves.png").is_file()  # the rest is there all the same


def test_writing_again_replaces_the_bundle_whole(search, tmp_path):
    first = search.folder / "champion.zip"
    before = first.read_bytes()
    tree = search.tree
    champion = tree.nodes[committed(search.result)["node"]]
    bundle = write_champion_bundle(search.task, search.run_dir, tree, champion,
                                   predictions=(search.folder / "predictions.csv").read_bytes(),
                                   official=committed(search.result)["official"], baselines=search.result.baselines)
    assert bundle.zip_path == first and zipfile.ZipFile(first).namelist() == zipfile.ZipFile(io.BytesIO(before)).namelist()
    assert not list(search.run_dir.glob(".champion-*"))  # no staging folder left behind


# --- the studio -----------------------------------------------------------------------------------
def _studio_run(run_dir: str, search: str = "tree", status: str = RunStatus.COMPLETED) -> Run:
    project = Project.objects.create(name=f"bundle-{Project.objects.count()}")
    task = Task.objects.create(project=project, name="discontinuous-1d", folder="/nowhere", metric_name="relative_l2")
    return Run.objects.create(task=task, search=search, status=status, run_dir=run_dir)


@pytest.mark.django_db
def test_a_viewer_downloads_the_bundle_and_sees_the_link(search, django_user_model):
    viewer = django_user_model.objects.create_user("vera", password="pw-vera-1843")
    run = _studio_run(str(search.run_dir))
    add_member(run.task.project, viewer, "viewer")
    client = Client()
    client.force_login(viewer)
    response = client.get(f"/runs/{run.pk}/champion.zip")
    assert response.status_code == 200 and response["Content-Type"] == "application/zip"
    assert f'filename="run-{run.pk}-discontinuous-1d-champion.zip"' in response["Content-Disposition"]
    assert b"".join(response.streaming_content) == (search.folder / "champion.zip").read_bytes()
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert page.count(f'href="/runs/{run.pk}/champion.zip"') == 2  # the run's header and the tree card
    assert 'id="champion-bundle"' in page and "hidden" not in page.split('id="tree-bundle"')[1].split(">")[0]
    assert client.get(f"/runs/{run.pk}/tree.json").json()["bundle"] is True
    # someone who is not a member gets nothing, as for a run that does not exist
    stranger = django_user_model.objects.create_user("sid", password="pw-sid-1843")
    client.force_login(stranger)
    assert client.get(f"/runs/{run.pk}/champion.zip").status_code == 404


@pytest.mark.django_db
def test_a_share_link_downloads_the_bundle(search, django_user_model):
    owner = django_user_model.objects.create_user("olive")
    run = _studio_run(str(search.run_dir))
    add_member(run.task.project, owner, "owner")
    signed = sharing.sign(sharing.create(run, owner, "1d"))
    response = Client().get(f"/share/{signed}/champion.zip")
    assert response.status_code == 200
    assert b"".join(response.streaming_content) == (search.folder / "champion.zip").read_bytes()
    page = Client().get(f"/share/{signed}/").content.decode()
    assert f'href="/share/{signed}/champion.zip"' in page and f"/runs/{run.pk}/champion.zip" not in page


@pytest.mark.django_db
def test_a_run_without_a_bundle_gets_404_saying_why(tmp_path, django_user_model):
    viewer = django_user_model.objects.create_user("vera", password="pw-vera-1843")
    runs = {"running tree": _studio_run(str(tmp_path / "a"), status=RunStatus.RUNNING),
            "finished tree": _studio_run(str(tmp_path / "b")),
            "mimosa": _studio_run(str(tmp_path / "c"), search="mimosa")}
    client = Client()
    client.force_login(viewer)
    said = {}
    for label, run in runs.items():
        add_member(run.task.project, viewer, "viewer")
        response = client.get(f"/runs/{run.pk}/champion.zip")
        assert response.status_code == 404
        said[label] = response.content.decode()
        assert f"Run {run.pk} has no champion bundle" in said[label]
        assert "champion-bundle" not in client.get(f"/runs/{run.pk}/").content.decode()
    assert "written when the search has committed" in said["running tree"]
    assert "none was written" in said["finished tree"]
    assert "only a search that packages its champion writes one (AgenticSciML tree)" in said["mimosa"]


@pytest.mark.django_db
def test_the_run_report_says_what_the_bundle_holds_and_where_it_is(search, tmp_path):
    from webapp.runs.report import report_html

    html = report_html(_studio_run(str(search.run_dir)))
    section = html.split('<section id="bundle">')[1].split("</section>")[0]
    assert "champion.zip" in section and str(search.folder / "champion.zip") in section
    for name in ("champion.py", "predictions.csv", "report.md"):
        assert f"<code>{name}</code>" in section
    assert '<section id="bundle">' not in report_html(_studio_run(str(tmp_path / "c"), search="mimosa"))
