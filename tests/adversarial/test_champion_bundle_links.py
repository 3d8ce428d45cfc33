"""The champion bundle never takes a file from outside the run's folder: a link put in place of
a checkpoint, of a job's state, of the kept validation predictions or of the zip itself is
refused (the bundle says what it left out), even when the file it points to holds exactly the
bytes that were expected."""
from __future__ import annotations

import json
import os
import zipfile

import pytest
from django.test import Client

from engine.bundle import bundle_zip, write_champion_bundle
from engine.search.tree import fold_predictions_path
from engine.task import load_task
from tests.studio_harness import add_member
from tests.unit.test_champion_bundle import POINTS, _studio_run, _training_run

SECRET = b"the answer key, or /etc/shadow"


def _everything_in(bundle) -> bytes:
    with zipfile.ZipFile(bundle.zip_path) as zf:
        return b"".join(zf.read(n) for n in zf.namelist())


def test_a_checkpoint_replaced_by_a_link_is_left_out(light_task, tmp_path):
    task = load_task(light_task)
    run_dir, tree, node, key = _training_run(tmp_path, task, SECRET, POINTS)
    state = json.loads((run_dir / "training" / key / "state.json").read_text())
    stored = run_dir / "training" / key / "checkpoints" / state["checkpoint"]["sha256"][:2] / state["checkpoint"]["sha256"]
    outside = tmp_path / "outside.bin"
    outside.write_bytes(SECRET)  # the very bytes the hash expects: only the link gives it away
    stored.unlink()
    stored.symlink_to(outside)
    bundle = write_champion_bundle(task, run_dir, tree, node, predictions=None, official={}, baselines={})
    assert not (bundle.folder / "checkpoint").exists()
    assert "link" in dict(bundle.missing)["trained checkpoint"]
    assert SECRET not in _everything_in(bundle)


def test_a_jobs_state_or_the_kept_fold_predictions_behind_a_link_are_not_read(light_task, tmp_path):
    task = load_task(light_task)
    run_dir, tree, node, key = _training_run(tmp_path, task, b"weights", POINTS)
    state = run_dir / "training" / key / "state.json"
    outside_state = tmp_path / "state.json"
    outside_state.write_text(state.read_text())
    state.unlink()
    state.symlink_to(outside_state)
    folds = fold_predictions_path(run_dir / "tree", node.id)
    folds.parent.mkdir(parents=True, exist_ok=True)
    outside_folds = tmp_path / "folds.json"
    outside_folds.write_text(json.dumps({"seed": 0, "folds": ["id,y\n0,1\n"]}))
    folds.symlink_to(outside_folds)
    bundle = write_champion_bundle(task, run_dir, tree, node, predictions=None, official={}, baselines={})
    missing = dict(bundle.missing)
    assert "no readable state" in missing["trained checkpoint and training curves"]
    assert "refused" in missing["validation predictions"]
    assert not (bundle.folder / "checkpoint").exists() and not (bundle.folder / "validation_predictions.csv").exists()


@pytest.mark.django_db
def test_the_studio_serves_no_zip_through_a_link(tmp_path, django_user_model):
    outside = tmp_path / "elsewhere.zip"
    with zipfile.ZipFile(outside, "w") as zf:
        zf.writestr("secret.txt", SECRET)
    as_file, as_folder = tmp_path / "run-file", tmp_path / "run-folder"
    (as_file / "champion").mkdir(parents=True)
    os.symlink(outside, as_file / "champion" / "champion.zip")
    as_folder.mkdir()
    (tmp_path / "real-champion").mkdir()
    os.symlink(outside, tmp_path / "real-champion" / "champion.zip")
    os.symlink(tmp_path / "real-champion", as_folder / "champion")
    viewer = django_user_model.objects.create_user("vera", password="pw-vera-1843")
    client = Client()
    client.force_login(viewer)
    for run_dir in (as_file, as_folder):
        assert bundle_zip(run_dir) is None
        run = _studio_run(str(run_dir))
        add_member(run.task.project, viewer, "viewer")
        response = client.get(f"/runs/{run.pk}/champion.zip")
        assert response.status_code == 404 and SECRET not in response.content


@pytest.mark.django_db
def test_the_run_report_reads_no_bundle_manifest_through_a_link(tmp_path):
    """A manifest.json swapped for a link to another file (here a JSON listing a secret file) is
    not read into the run's report: the report then says nothing of a bundle."""
    from webapp.runs.bundles import bundle_contents
    from webapp.runs.report import report_html

    folder = tmp_path / "run" / "champion"
    folder.mkdir(parents=True)
    with zipfile.ZipFile(folder / "champion.zip", "w") as zf:
        zf.writestr("champion.py", "print(1)\n")
    planted = tmp_path / "planted.json"
    planted.write_text(json.dumps({"files": [{"name": SECRET.decode(), "bytes": 1}]}))
    os.symlink(planted, folder / "manifest.json")
    run = _studio_run(str(tmp_path / "run"))
    assert bundle_zip(tmp_path / "run") is not None and bundle_contents(run) is None
    assert SECRET.decode() not in report_html(run)
