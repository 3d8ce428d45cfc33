"""The evidence panel read in the instant a run creates its graph: SQLite has made the file, the
writer has not yet made its tables. evidence.json answered 500 ("no such table: branches") with an
HTML error page, the panel's script parsed it as JSON, and the run page raised a JavaScript error
(seen in CI, the training panel's browser test). A graph that is not there yet is read as none:
the panel is rebuilt from the run's events, as it is before the graph exists."""
from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from engine.evidence.graph import EvidenceError
from engine.evidence.memory import EVIDENCE_FILE
from engine.evidence.sqlite_store import SqliteEvidenceStore
from tests.studio_harness import add_member, running_run
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db(transaction=True)


def _half_made_graph(path: Path) -> None:
    """What the writer leaves for a moment: the file and its journal mode, no tables."""
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=WAL")
    db.close()


def test_a_graph_without_its_tables_is_not_there_yet(tmp_path):
    _half_made_graph(tmp_path / EVIDENCE_FILE)
    with pytest.raises(EvidenceError, match="still being created"):
        SqliteEvidenceStore(tmp_path / EVIDENCE_FILE, readonly=True)


def test_the_panel_of_a_run_whose_graph_is_being_created_answers_json(light_task, tmp_path):
    run = running_run(light_task, "Evidence")
    Run.objects.filter(pk=run.pk).update(run_dir=str(tmp_path / "run"), search="scimars", memory=True)
    _half_made_graph(tmp_path / "run" / EVIDENCE_FILE)
    user = get_user_model().objects.create_user("vera", password="pw-vera")
    add_member(run.task.project, user, "viewer")
    client = Client()
    client.force_login(user)
    answer = client.get(f"/runs/{run.pk}/evidence.json")
    assert answer.status_code == 200 and answer["Content-Type"] == "application/json"
    assert answer.json()["source"] == "trace" and answer.json()["records"] == []
