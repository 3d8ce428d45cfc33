"""Issue 14's done-when for training jobs, in a real browser: a run on a task that allows a neural
network trains the offline scientist's PyTorch program as a job on the studio's training worker;
the Training panel's curve grows live; the person cancels the job, pauses the run, resumes the
job, and its curve goes on from the last checkpoint the job kept (its epochs continue, they do
not restart). Screenshots of each moment land in test-artifacts/screenshots/."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from engine.training.folder import JobFolder
from engine.training.remote import open_tickets
from tests.conftest import EXAMPLES
from tests.studio_harness import add_member, wait_for
from webapp.runs import controls
from webapp.runs.models import GatePolicy, Run, RunStatus
from webapp.tasks import registration
from webapp.teams.models import Project

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
pytest.importorskip("torch")

FIRST_JOB_MS = 240_000  # the team plans and writes the program before its first job starts


@pytest.fixture(scope="module")
def neural_task(tmp_path_factory) -> Path:
    """examples/dam-break-neural with two validation folds instead of three."""
    folder = tmp_path_factory.mktemp("neural") / "dam-break-neural"
    shutil.copytree(EXAMPLES / "dam-break-neural", folder)
    config = json.loads((folder / "Data_config.json").read_text())
    config["validation"] = {"split": "kfold", "folds": 2}
    (folder / "Data_config.json").write_text(json.dumps(config, indent=2))
    return folder


@pytest.fixture
def training_worker(studio):
    studio.start_training_worker(1)
    yield studio
    studio.stop_training_worker()


def _epochs_drawn(page: Page, key: str) -> int:
    return int(page.locator(f"#curve-{key}").get_attribute("data-epochs") or 0)


def test_a_training_job_grows_its_curve_live_and_resumes_from_its_checkpoint_after_a_cancel(
        page: Page, training_worker, neural_task):
    project = Project.objects.create(name="Training in the browser")
    add_member(project, "ada", "owner")
    task = registration.task_for_folder(project, neural_task)
    # From the team: the archive is not what this test is about (a task new to it is embedded first)
    run = controls.start_run(task, search="mimosa", iterations=1, gate_policy=GatePolicy.AUTOMATIC,
                             single_agent=False, start="team")
    page.goto(f"/runs/{run.pk}/")
    expect(page.locator("#ws-state")).to_have_text("live")

    # The first job appears in the panel, on the CPU, and its curve grows as epochs arrive.
    panel = page.locator("#training-panel")
    expect(panel).to_be_visible(timeout=FIRST_JOB_MS)
    row = page.locator("#training-jobs tr").first
    expect(row).to_have_attribute("data-status", "running", timeout=60_000)
    key = row.get_attribute("id").removeprefix("job-")
    row = page.locator(f"#job-{key}")  # this job's row, wherever later jobs put it
    expect(row).to_contain_text("cpu")
    wait_for(lambda: _epochs_drawn(page, key) >= 10, 120, interval=0.2, what="10 epochs on the curve")
    early = _epochs_drawn(page, key)
    _panel_shot(page, "1-curve-growing")
    wait_for(lambda: _epochs_drawn(page, key) >= early + 10, 120, interval=0.2, what="the curve to grow")
    assert float(row.locator("progress").get_attribute("value")) > 0
    _panel_shot(page, "2-curve-grown")

    # The run's worker handed the job to the training queue and waits on it there.
    folder = JobFolder(Path(run.run_dir) / "training", key)
    waited, = open_tickets(folder)
    assert waited.spec().get("mode") != "here" and not waited.spec().get("alone")

    # Cancel: the job stops, keeping its last checkpoint; the run goes on without it.
    page.get_by_role("button", name=f"Cancel job {key[:8]}").click()
    expect(row).to_have_attribute("data-status", "cancelled", timeout=30_000)
    expect(page.locator("#training-said")).to_contain_text("cancel asked")
    kept = folder.load().checkpoint["epoch"]
    stopped_at = folder.load().epoch
    assert kept is not None and stopped_at >= kept
    _panel_shot(page, "3-cancelled")

    # The person pauses the run (its worker starts nothing more), then resumes the cancelled job:
    # it trains alone on the training worker, from the checkpoint, not from epoch 0.
    page.get_by_role("button", name="Pause", exact=True).click()
    wait_for(lambda: Run.objects.get(pk=run.pk).status == RunStatus.PAUSED, 120, what="the run to pause")
    resume = page.get_by_role("button", name=f"Resume job {key[:8]}")
    expect(resume).to_be_enabled()
    resume.click()
    expect(page.locator("#training-said")).to_contain_text("from its last checkpoint")
    expect(row).to_have_attribute("data-status", "running", timeout=30_000)
    wait_for(lambda: (folder.load().epoch or 0) >= kept + 8, 120, interval=0.2, what="epochs after the resume")
    page.wait_for_timeout(600)  # the last points reach the page
    state = folder.load()
    assert state.first_epoch == kept + 1 and state.runs == 2  # started again from the kept checkpoint
    epochs = [p["epoch"] for p in state.points]
    before, after = epochs[:stopped_at + 1], epochs[stopped_at + 1:]
    assert before == list(range(stopped_at + 1))
    assert after[:5] == list(range(kept + 1, kept + 6))  # continued from the checkpoint, not restarted
    # The page shows where it resumed, and the curve holds one point per epoch, beyond the cancel.
    expect(page.locator(f"#curve-{key} text", has_text="resumed")).to_have_count(1)
    assert _epochs_drawn(page, key) >= kept + 8
    _panel_shot(page, "4-resumed-from-checkpoint")
    folder.send("cancel")  # the worker stops at once, not after the job's last epoch


def _panel_shot(page: Page, step: str) -> None:
    """The Training panel alone, and the whole page."""
    from tests.browser.conftest import SHOTS

    page.locator("#training-panel").screenshot(path=str(SHOTS / f"test_training_panel-{step}.png"))
    page.shot(step)


def test_a_tree_node_whose_validation_trained_shows_its_curve(page: Page, studio, tmp_path):
    """Stored tree events and a node's training jobs (no worker): the tree card offers the
    curves of the nodes that trained, and shows the chosen (or tapped) node's."""
    import time as _time

    from engine.training.folder import JobState
    from webapp.runs.models import Event
    from webapp.tasks.models import Task

    project = Project.objects.create(name="Tree training curves")
    add_member(project, "ada", "owner")
    task = Task.objects.create(project=project, name="disc", folder=str(EXAMPLES / "discontinuous-1d"),
                               metric_name="relative_l2", higher_is_better=False)
    run = Run.objects.create(task=task, search="tree", status=RunStatus.COMPLETED, run_dir=str(tmp_path / "run"))
    for seq, (node, parent, score) in enumerate((("n0", None, 0.4), ("n1", "n0", 0.2)), start=1):
        Event.objects.create(run=run, seq=seq, source="s", ts=float(seq), kind="tree_node", iteration=seq - 1,
                             payload={"node": node, "parent": parent, "iteration": seq - 1, "strategy": "moe",
                                      "params": {}, "score": score, "status": "scored", "knowledge": [],
                                      "debug_attempts": 0, "verdict": "", "debate_turns": 2, "report": "",
                                      "vetoed": False, "promoted": False, "decided_by": ""})
    for fold, key in enumerate(("f1job", "f2job")):
        JobFolder(Path(run.run_dir) / "training", key).save(JobState(
            key, purpose="in-loop validation", node="n1", status="ok", device="cpu", started=_time.time() + fold,
            epoch=29, epochs=30, best_val=0.05, points=[{"t": i, "epoch": i, "loss": 1 / (i + 1), "val": 1.3 / (i + 1)}
                                                       for i in range(30)]))
    page.goto(f"/runs/{run.pk}/")
    chooser = page.locator("#tree-training-node")
    expect(chooser).to_have_value("n1")
    curve = page.locator("#tree-node-curve")
    expect(curve).to_have_attribute("aria-label", "Training curves of node n1: 2 job(s)")
    expect(curve.locator("g.trace")).to_have_count(4)  # loss and validation of each fold's job
    page.evaluate("document.dispatchEvent(new CustomEvent('trellis:node', {detail: 'n0'}))")  # n0 never trained
    expect(chooser).to_have_value("n1")
    page.locator("#tree-card").screenshot(path=str(Path(__file__).resolve().parents[2] / "test-artifacts" /
                                                   "screenshots" / "test_training_panel-5-tree-node-curve.png"))
