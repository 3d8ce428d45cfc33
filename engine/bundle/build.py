"""Write ``<run>/champion/`` and its ``champion.zip`` after a tree search's final commitment."""
from __future__ import annotations

import csv
import hashlib
import os
import shutil
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from .. import official as official_evaluation
from ..search.tree import Node, Tree, fold_predictions_path
from ..task import Task
from . import plots
from .parts import (Job, Pairs, PartMissing, champion_job, copy_checkpoint, heldout_pairs, validation_pairs)
from .report import Contents, analysis_report, manifest, readme

BUNDLE_DIR = "champion"
ZIP_NAME = "champion.zip"
# Bounds on what one bundle holds: a part over its cap is left out and the README says so.
MAX_CODE_BYTES = 1024 * 1024
MAX_PREDICTIONS_BYTES = 64 * 1024 * 1024
MAX_CHECKPOINT_BYTES = 512 * 1024 * 1024


@dataclass
class Bundle:
    folder: Path
    zip_path: Path
    files: list[str] = field(default_factory=list)
    missing: list[tuple[str, str]] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"folder": str(self.folder), "zip": str(self.zip_path), "files": self.files,
                "missing": [{"part": p, "why": w} for p, w in self.missing]}


def bundle_zip(run_dir: Path) -> Path | None:
    """The run's champion.zip when it is there as a regular file (never a link), else None."""
    folder = Path(run_dir) / BUNDLE_DIR
    path = folder / ZIP_NAME
    if folder.is_symlink() or path.is_symlink() or not path.is_file():
        return None
    return path


def write_champion_bundle(task: Task, run_dir: Path, tree: Tree, champion: Node, *, predictions: bytes | None,
                          official: dict, baselines: dict, stopped: str = "", notes: str = "") -> Bundle:
    """The champion's script, its predictions (on the task's test inputs, and on every in-loop
    validation fold), its trained checkpoint when its program was a training job, plots, the
    analysis report, a README, and all of it as champion.zip.

    Called after the official evaluation: only then may the held-out answer key be read, for
    the plots labelled held-out (official). A part that cannot be made is listed with its
    reason in the README and the report; the rest is written all the same."""
    run_dir = Path(run_dir)
    stage = Path(tempfile.mkdtemp(prefix=".champion-", dir=run_dir))
    os.chmod(stage, 0o755)  # mkdtemp makes it private; the studio reads it like the rest of the run
    try:
        contents = _write_parts(task, run_dir, stage, tree, champion, predictions=predictions, official=official,
                                baselines=baselines, stopped=stopped, notes=notes)
        _write_zip(stage, contents, task, champion, official)
        final = run_dir / BUNDLE_DIR
        old = run_dir / f".champion-old-{os.getpid()}"
        if final.is_symlink():
            final.unlink()
        elif final.exists():
            final.rename(old)
        stage.rename(final)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return Bundle(final, final / ZIP_NAME, [n for n, _ in contents.files] + ["README.txt"], contents.missing)


def _write_parts(task: Task, run_dir: Path, out: Path, tree: Tree, champion: Node, *, predictions: bytes | None,
                 official: dict, baselines: dict, stopped: str, notes: str) -> Contents:
    c = Contents()
    code = champion.code.encode()
    if len(code) <= MAX_CODE_BYTES:
        (out / "champion.py").write_bytes(code)
        c.add("champion.py", f"the champion's program (node {champion.id}): run it in a folder holding the task's "
                             f"data files to train it and write {task.resources.predictions_file}")
    else:
        c.lack("champion.py", f"{len(code)} bytes, over the bundle's cap of {MAX_CODE_BYTES}")
    if predictions is not None and len(predictions) <= MAX_PREDICTIONS_BYTES:
        (out / "predictions.csv").write_bytes(predictions)
        c.add("predictions.csv", "what the champion predicted for the task's test inputs at the final commitment "
                                 "(the file the official evaluation scored)")
    else:
        c.lack("predictions.csv", "the final commitment delivered no predictions" if predictions is None else
               f"{len(predictions)} bytes, over the bundle's cap of {MAX_PREDICTIONS_BYTES}")

    validation = _pairs(c, "validation predictions", lambda: validation_pairs(
        task, run_dir, fold_predictions_path(Path("tree"), champion.id).as_posix()))
    if validation is not None:
        (out / "validation_predictions.csv").write_bytes(validation.csv_bytes())
        c.add("validation_predictions.csv", "the champion's predictions on every in-loop validation fold (training "
                                            "rows held out in turn; train_row = the row's number in the "
                                            "training file) beside their true targets, with residuals")
    heldout = None
    if predictions is not None:
        heldout = _pairs(c, "held-out (official) plots", lambda: heldout_pairs(task, predictions, _truth(task)))

    try:
        job = champion_job(task, run_dir, champion.id, champion.code)
    except PartMissing as exc:
        job = None
        c.lack("trained checkpoint and training curves", str(exc))
    if job is not None:
        _checkpoint(c, run_dir, out, job)
        if job.state.points:
            with (out / "training_curve.csv").open("w", newline="") as fh:
                keys = ["t", "epoch", "loss", "val", "lr"]
                w = csv.DictWriter(fh, fieldnames=keys, extrasaction="ignore")
                w.writeheader()
                w.writerows(p for p in job.state.points if isinstance(p, dict))
            c.add("training_curve.csv", f"the points the training job {job.key} reported: seconds, epoch, loss, "
                                        "validation loss, learning rate")

    _plots(c, out, task, tree, champion, validation, heldout, job, official)
    report = analysis_report(task, tree, champion, official=official, baselines=baselines, validation=validation,
                             heldout=heldout, job=job, stopped=stopped, notes=notes,
                             contents=Contents([*c.files, ("report.md", "this analysis report"),
                                                ("manifest.json", "every file with its size and sha256")],
                                               c.missing))
    (out / "report.md").write_text(report, encoding="utf-8")
    c.add("report.md", "the analysis report: the task, the champion's strategy and lineage, its validation and "
                       "official scores, the baselines, the result analysts' notes, the checks")
    return c


def _truth(task: Task) -> dict[str, str]:
    truth = official_evaluation.heldout_truth(task)
    if truth is None:
        raise PartMissing("the task's heldout/ has no CSV with the id and target columns")
    return truth


def _pairs(c: Contents, part: str, make) -> Pairs | None:
    try:
        return make()
    except (PartMissing, OSError, ValueError, KeyError, csv.Error) as exc:
        c.lack(part, str(exc) or type(exc).__name__)
        return None


def _checkpoint(c: Contents, run_dir: Path, out: Path, job: Job) -> None:
    folder = out / "checkpoint"
    folder.mkdir()
    tmp = folder / ".incoming"
    try:
        with tmp.open("wb") as fh:
            kept = copy_checkpoint(run_dir, job, fh, MAX_CHECKPOINT_BYTES)
    except PartMissing as exc:
        tmp.unlink(missing_ok=True)
        folder.rmdir()
        c.lack("trained checkpoint", str(exc))
        return
    tmp.rename(folder / kept["name"])
    c.add(f"checkpoint/{kept['name']}", f"the trained checkpoint of the champion's training job {job.key} "
                                        f"(epoch {kept['epoch']}, sha256 {kept['sha256'][:12]}); trellis_train "
                                        "hands it back to the program as its resume checkpoint")


def _plots(c: Contents, out: Path, task: Task, tree: Tree, champion: Node, validation: Pairs | None,
           heldout: Pairs | None, job: Job | None, official: dict) -> None:
    folder = out / "plots"
    folder.mkdir()
    metric = task.metric.name
    wanted = []
    for which, pairs, line in (
            ("validation", validation, f"validation {metric} {champion.score:.4g} (mean over folds)"
             if champion.score is not None else f"validation {metric}"),
            ("heldout", heldout, f"official {metric} {official['value']:.4g}" if official.get("ok")
             else f"official {metric}: none")):
        if pairs is not None:
            wanted += [(f"prediction_vs_truth_{which}.png",
                        lambda p, pairs=pairs, line=line: plots.prediction_vs_truth(pairs, p, line)),
                       (f"residuals_{which}.png", lambda p, pairs=pairs: plots.residuals(pairs, p))]
    if job is not None and job.state.points:
        wanted.append(("training_curves.png", lambda p: plots.training_curves(job.state.points, p, job.key)))
    elif job is None:
        if not any(part.startswith("trained checkpoint") for part, _ in c.missing):
            c.lack("training curves", "the champion's program is not a training job (it does not import trellis_train)")
    else:
        c.lack("training curves", f"the training job {job.key} reported no point")
    nodes = [{**row, "failed_checks": row.get("failed_checks")} for row in tree.table()]
    wanted.append(("search_progress.png", lambda p: plots.search_progress(nodes, champion.id, p, tree.metric,
                                                                           tree.higher_is_better)))
    for name, draw in wanted:
        try:
            title = draw(folder / name)
        except plots.PlotsUnavailable as exc:
            c.lack("plots", str(exc))
            break
        except (ValueError, TypeError) as exc:  # data no plot can be drawn from: said, the rest drawn
            c.lack(f"plots/{name}", str(exc))
            continue
        c.add(f"plots/{name}", title)
    if not any(n.startswith("plots/") for n, _ in c.files):
        folder.rmdir()


def _write_zip(folder: Path, contents: Contents, task: Task, champion: Node, official: dict) -> None:
    """README.txt and manifest.json (every file's size and sha256), then champion.zip holding
    them all. The zip is written under a temporary name and renamed, so a half-written zip is
    never served."""
    entries = []
    for name, _ in contents.files:
        h = hashlib.sha256()
        with (folder / name).open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        entries.append({"name": name, "bytes": (folder / name).stat().st_size, "sha256": h.hexdigest()})
    contents.add("manifest.json", "every file of the bundle with its size and sha256")
    (folder / "manifest.json").write_text(manifest(task, champion, entries, contents.missing, official),
                                          encoding="utf-8")
    (folder / "README.txt").write_text(readme(task, champion, contents, official), encoding="utf-8")
    tmp = folder / f".{ZIP_NAME}.tmp"
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name in [n for n, _ in contents.files] + ["README.txt"]:
            # a checkpoint is mostly incompressible floats: stored as it is
            kind = zipfile.ZIP_STORED if name.startswith("checkpoint/") else zipfile.ZIP_DEFLATED
            zf.write(folder / name, arcname=name, compress_type=kind)
    tmp.rename(folder / ZIP_NAME)
