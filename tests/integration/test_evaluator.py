"""The Evaluator (issue 27 item 3): a task folder without evaluate.py gets one drafted from
Evaluation.md, tested in the evaluator's sandbox, and used only after a person approved the very
draft they read; the drafted scorer agrees with the hand-written ones the examples ship."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from engine import evaluator_draft as ev
from engine.assessment import trivial_predictions
from engine.errors import TaskSpecError
from engine.evaluation import evaluate_predictions
from engine.task import load_task

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def without_evaluator(example: str, tmp_path: Path) -> Path:
    folder = tmp_path / example
    shutil.copytree(EXAMPLES / example, folder, ignore=shutil.ignore_patterns("__pycache__"))
    (folder / "evaluate.py").unlink()
    return folder


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine", *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_a_task_without_evaluate_py_runs_only_after_a_person_approves_the_draft_they_read(tmp_path):
    folder = without_evaluator("discontinuous-1d", tmp_path)
    refused = cli("run", str(folder))
    assert refused.returncode == 2 and "python -m engine evaluator" in refused.stderr

    drafted = cli("evaluator", str(folder))
    assert drafted.returncode == 0, drafted.stdout[-2000:] + drafted.stderr[-2000:]
    sha = load_draft_sha(folder)
    assert "def score(pred, true)" in drafted.stdout and f"--approve {sha[:12]}" in drafted.stdout
    assert "passed: the answer key scored against itself" in drafted.stdout
    assert not (folder / "evaluate.py").exists()
    with pytest.raises(TaskSpecError, match="waits for your approval"):
        load_task(folder)

    wrong = cli("evaluator", str(folder), "--approve", "0123456789ab")
    assert wrong.returncode == 2 and "read it again before you approve it" in wrong.stderr
    assert not (folder / "evaluate.py").exists()

    approved = cli("evaluator", str(folder), "--approve", sha[:12], "--by", "ana")
    assert approved.returncode == 0, approved.stderr
    record = json.loads((folder / ev.APPROVAL).read_text())
    assert record["approved_by"] == "ana" and record["sha256"] == sha and record["written_by"] == "offline template"
    assert not (folder / ev.DRAFT).exists()
    task = load_task(folder)
    trivial = trivial_predictions(task)["constant"]
    assert evaluate_predictions(task, trivial)["ok"]


def load_draft_sha(folder: Path) -> str:
    return json.loads((folder / (ev.DRAFT + ".json")).read_text())["sha256"]


@pytest.mark.parametrize("example", ["discontinuous-1d", "diabetes-progression", "wine-cultivar",
                                     "soil-respiration-sites", "reaction-kinetics", "epidemic-sir"])
def test_the_drafted_scorer_gives_the_shipped_evaluate_pys_scores(example, tmp_path):
    shipped = load_task(EXAMPLES / example)
    folder = without_evaluator(example, tmp_path)
    draft = ev.draft_for(folder)
    assert draft.ok, draft.tests
    ev.approve(folder, draft.sha256[:16], "test")
    drafted = load_task(folder)
    answers = list(trivial_predictions(shipped).values())
    assert answers
    for answer in answers:
        want, got = evaluate_predictions(shipped, answer), evaluate_predictions(drafted, answer)
        assert want["ok"] and got["ok"], (want, got)
        assert got["value"] == pytest.approx(want["value"], rel=1e-9, abs=1e-12)
        assert got["higher_is_better"] == want["higher_is_better"]


def test_a_metric_the_template_does_not_know_is_refused_saying_what_to_do(tmp_path):
    folder = without_evaluator("river-flow-forecast", tmp_path)  # mase: per series, with a history
    with pytest.raises(TaskSpecError) as err:
        ev.draft_for(folder)
    said = str(err.value)
    assert "no template for metric 'mase'" in said and "--model" in said and "write evaluate.py yourself" in said
    assert not (folder / ev.DRAFT).exists()


def test_a_draft_changed_after_its_tests_is_not_approved(tmp_path):
    folder = without_evaluator("diabetes-progression", tmp_path)
    draft = ev.draft_for(folder)
    (folder / ev.DRAFT).write_text(draft.source.replace("sys.exit(2)", "sys.exit(0)"))
    changed = ev.pending_draft(folder)
    with pytest.raises(TaskSpecError, match="not the"):
        ev.approve(folder, draft.sha256[:12], "mallory")
    with pytest.raises(TaskSpecError, match="not tested since it was last changed"):
        ev.approve(folder, changed.sha256[:12], "mallory")
    assert not (folder / "evaluate.py").exists()


def test_a_draft_that_fails_its_tests_cannot_be_approved(tmp_path):
    folder = without_evaluator("diabetes-progression", tmp_path)

    def careless(task):
        draft = ev.offline_draft(task)
        draft.source = draft.source.replace("return float(1 - ", "return 0.5 * float(1 - ")  # r2 of the truth is 0.5
        return draft

    draft = ev.draft_for(folder, careless)
    assert not draft.ok and any(t.startswith("FAILED the answer key scored against itself gives 0.5") for t in draft.tests)
    with pytest.raises(TaskSpecError, match="has not passed its tests"):
        ev.approve(folder, draft.sha256[:12], "ana")


def test_a_model_drafts_evaluate_py_and_its_draft_is_tested_like_the_templates(tmp_path):
    """The model path through an OpenAI-compatible server: the model's first answer holds no
    program and is re-asked once; its program is tested in the sandbox before anyone sees it."""
    from tests.fake_openai import answer, fake_openai

    folder = without_evaluator("diabetes-progression", tmp_path)
    written = ev.offline_draft(load_task(folder, require_evaluator=False)).source
    with fake_openai([answer("I would compute R squared."), answer(f"Here it is:\n```python\n{written}```\n")]) as server:
        done = subprocess.run([sys.executable, "-m", "engine", "evaluator", str(folder), "--model", "openai/fake",
                               "--api-base", server.base_url], cwd=ROOT, capture_output=True, text=True, timeout=300,
                              env={**__import__("os").environ, "OPENAI_API_KEY": "none"})
        asked = [r.body for r in server.requests]
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert len(asked) == 2  # one re-ask for the answer that held no program
    assert "r2" in json.dumps(asked[0]["messages"])  # the model was shown Evaluation.md's metric
    assert "(written by openai/fake)" in done.stdout and "passed: the answer key scored against itself gives 1" in done.stdout
    assert ev.pending_draft(folder).ok
