"""A training worker runs what a ticket says: a forged or corrupted ticket must not point it at
files outside the studio's runs, nor escape the job's folder; a hostile program's events file
cannot put anything but training events into a run's trace."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.training.folder import JobFolder
from engine.training.remote import Ticket, _Tail


@pytest.mark.parametrize("ticket", ["../../etc", "a/b", "x" * 41, ""])
def test_a_ticket_id_that_is_not_a_plain_name_is_refused(tmp_path, ticket):
    with pytest.raises(ValueError):
        Ticket(JobFolder(tmp_path, "job1"), ticket)


def test_the_training_task_refuses_a_ticket_outside_the_runs_folder(tmp_path, settings, monkeypatch):
    from engine.training import worker
    from webapp.runs.training import train

    ran = []
    monkeypatch.setattr(worker, "work", lambda spec, **kw: ran.append(spec) or "ok")
    settings.TRELLIS_RUNS_DIR = tmp_path / "runs"
    for root in ("/etc", str(tmp_path / "elsewhere"), str(tmp_path / "runs" / ".." / "elsewhere"), ""):
        assert train.run({"root": root, "key": "k", "ticket": "t"}) == "refused"
    assert not ran
    assert train.run({"root": str(tmp_path / "runs" / "run-1" / "training"), "key": "k", "ticket": "t"}) == "ok"


def test_only_training_events_come_out_of_a_tickets_events_file(tmp_path):
    events = tmp_path / "events.jsonl"
    lines = [{"kind": "judgement", "payload": {"J": 1.0}},                     # not a training event
             {"kind": "training_progress", "payload": {"job": "k", "epoch": 1, "admin": True}},  # unknown field
             "not json", ["a", "list"],
             {"kind": "training_progress", "payload": {"job": "k", "epoch": 2, "loss": 0.5}}]
    events.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n" + "x" * 100)
    payloads = _Tail(Path(events)).read()
    assert [(p.kind, p.epoch) for p in payloads] == [("training_progress", 2)]
