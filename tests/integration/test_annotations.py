"""Team annotation in the studio (issue 13): label sets, annotations with threaded replies on
events and mutations (who may write, what is refused, the live message and the audit entry),
queues built by a filter and worked by two annotators with their agreement on the queue page,
export to JSONL/CSV and import back (all rows or none), the same through the CLI, and the
project's audit log page. Django's test client against the database; no worker or Redis."""
from __future__ import annotations

import csv
import io
import json

import pytest
from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command
from django.test import Client

from tests.studio_harness import add_member, proposed_mutation, running_run
from webapp.annotations import views as annotation_views
from webapp.annotations.agreement import cohen_kappa
from webapp.annotations.models import Annotation, AnnotationQueue, LabelSet
from webapp.runs.models import Event
from webapp.teams.models import AuditEntry

pytestmark = pytest.mark.django_db(transaction=True)

LABELS = ["wrong data path", "hallucinated value", "good repair"]


def _event(run, seq: int, kind: str, agent: str, iteration: int, **payload) -> Event:
    return Event.objects.create(run=run, seq=seq, source="r", source_seq=seq, ts=1000.0 + seq, kind=kind,
                                agent=agent, iteration=iteration, payload=payload)


@pytest.fixture
def studio(light_task, monkeypatch):
    """A run with a small trace (checks that pass and fail, two agents, two iterations), a label
    set scored pass/fail, and a client per role; broadcasts are collected instead of sent."""
    run = running_run(light_task, "Annotated")
    project = run.task.project
    # payloads as the engine writes them (a row its kind's model refuses is read as nothing)
    _event(run, 1, "agent_finished", "planner", 1, status="SUCCESS", message="", outputs={})
    _event(run, 2, "check", "coder", 1, name="shape", passed=False, detail="3 columns, expected 2")
    _event(run, 3, "agent_finished", "coder", 1, status="SUCCESS", message="", outputs={})
    _event(run, 4, "check", "coder", 2, name="shape", passed=True)
    _event(run, 5, "judgement", "judge", 2, iteration_n=2, workflow_hash="h" * 64,
           checks=[{"name": "finite", "passed": False}], ok=False)
    _event(run, 6, "check", "coder", 2, name="range", passed=False, detail="negative age")
    sent = []
    monkeypatch.setattr(annotation_views, "broadcast", lambda r, m: sent.append((getattr(r, "pk", r), m)))
    users = get_user_model().objects
    clients = {}
    for name, role in (("vera", "viewer"), ("anna", "annotator"), ("abel", "annotator"), ("rita", "reviewer")):
        user = users.create_user(name, password="pw-" + name)
        add_member(project, user, role)
        clients[name] = Client()
        clients[name].force_login(user)
    outsider = Client()
    outsider.force_login(users.create_user("otto", password="pw-otto"))
    clients["otto"] = outsider
    ls = LabelSet.objects.create(project=project, name="Failure modes", labels=LABELS, score_kind="pass_fail")
    return {"run": run, "project": project, "c": clients, "sent": sent, "ls": ls}


def _annotate(client, run, **data):
    return client.post(f"/runs/{run.pk}/annotations", data)


def test_annotators_annotate_and_reply_viewers_read_outsiders_see_nothing(studio):
    run, c, ls = studio["run"], studio["c"], studio["ls"]
    url = f"/runs/{run.pk}/annotations?target_kind=event&target_ref=2"
    assert c["vera"].get(url).status_code == 200
    assert c["otto"].get(url).status_code == 404
    assert _annotate(c["vera"], run, target_kind="event", target_ref="2", comment="mine").status_code == 403
    assert _annotate(c["otto"], run, target_kind="event", target_ref="2", comment="mine").status_code == 404
    assert not Annotation.objects.exists()

    r = _annotate(c["anna"], run, target_kind="event", target_ref="2", label_set=ls.pk,
                  labels=["wrong data path"], passed="fail", comment="reads the raw file, not the split")
    assert r.status_code == 201
    first = Annotation.objects.get()
    assert (first.labels, first.passed, first.author.username) == (["wrong data path"], False, "anna")
    assert studio["sent"][-1][1]["kind"] == "annotation" and studio["sent"][-1][1]["target_ref"] == "2"

    # a threaded reply, by another annotator; it belongs to the same event
    r = _annotate(c["abel"], run, target_kind="event", target_ref="2", parent=first.pk, comment="agreed, see seq 6")
    assert r.status_code == 201
    reply = Annotation.objects.get(parent=first)
    assert (reply.target_kind, reply.target_ref, reply.author.username) == ("event", "2", "abel")
    page = c["vera"].get(url).content.decode()
    assert "reads the raw file" in page and "agreed, see seq 6" in page and "wrong data path" in page
    assert "Annotate</button>" not in page  # a viewer gets no form
    assert "Annotate</button>" in c["anna"].get(url).content.decode()

    # refused, writing nothing: a label outside the set, a score on a pass/fail set, a missing event
    n = Annotation.objects.count()
    bad = _annotate(c["anna"], run, target_kind="event", target_ref="2", label_set=ls.pk, labels=["typo"])
    assert bad.status_code == 400 and "not in label set" in bad.content.decode()
    assert _annotate(c["anna"], run, target_kind="event", target_ref="2", label_set=ls.pk, score="3").status_code == 400
    assert _annotate(c["anna"], run, target_kind="event", target_ref="99", comment="x").status_code == 404
    assert _annotate(c["anna"], run, target_kind="event", target_ref="2").status_code == 400  # nothing said
    assert Annotation.objects.count() == n

    # a mutation beside the queue, and the trace's event detail loads the annotations
    m = proposed_mutation(run)
    assert _annotate(c["rita"], run, target_kind="mutation", target_ref=str(m.pk), label_set=ls.pk,
                     labels=["good repair"], passed="pass").status_code == 201
    detail = c["vera"].get(f"/runs/{run.pk}/events/2").content.decode()
    assert f"/runs/{run.pk}/annotations?target_kind=event&target_ref=2" in detail

    entries = AuditEntry.objects.filter(project=studio["project"], action="annotation")
    assert sorted(e.actor for e in entries) == ["user:abel", "user:anna", "user:rita"]
    assert entries.filter(detail__reply_to=first.pk).count() == 1


def test_label_sets_are_managed_by_reviewers(studio):
    c, project = studio["c"], studio["project"]
    url = f"/projects/{project.pk}/label-sets"
    assert c["anna"].get(url).status_code == 200
    assert c["anna"].post(url, {"name": "Quality", "labels": "good\nbad", "score_kind": "scale"}).status_code == 403
    assert c["otto"].get(url).status_code == 404
    r = c["rita"].post(url, {"name": "Quality", "labels": "good\nbad, good", "score_kind": "scale",
                             "scale_min": "1", "scale_max": "7"})
    assert r.status_code == 302
    ls = LabelSet.objects.get(name="Quality")
    assert (ls.labels, ls.scale_max, ls.created_by.username) == (["good", "bad"], 7, "rita")
    dup = c["rita"].post(url, {"name": "Failure modes", "labels": "x", "score_kind": "none"})
    assert dup.status_code == 409 and "already" in dup.content.decode()
    ten = "\n".join(f"l{i}" for i in range(10))
    assert c["rita"].post(url, {"name": "Many", "labels": ten, "score_kind": "none"}).status_code == 400
    # edit: rename and drop a label
    assert c["rita"].post(url, {"id": ls.pk, "name": "Quality v2", "labels": "good", "score_kind": "scale",
                                "scale_min": "0", "scale_max": "10"}).status_code == 302
    ls.refresh_from_db()
    assert (ls.name, ls.labels, ls.scale_min) == ("Quality v2", ["good"], 0)


def _work(client, queue, position, **data):
    return client.post(f"/queues/{queue.pk}/items/{position}", data)


def test_a_queue_by_filter_two_annotators_and_their_agreement(studio):
    run, c, ls, project = studio["run"], studio["c"], studio["ls"], studio["project"]
    url = f"/projects/{project.pk}/queues"
    form = {"name": "Failed checks", "label_set": ls.pk, "runs": [run.pk], "check_failed": "on", "target_kind": "event"}
    assert c["anna"].post(url, form).status_code == 403
    r = c["rita"].post(url, form)
    assert r.status_code == 302
    queue = AnnotationQueue.objects.get()
    assert [(i.target_kind, i.target_ref) for i in queue.items.all()] == [("event", "2"), ("event", "5"), ("event", "6")]
    # other filters: agent + iteration, and kinds
    c["rita"].post(url, {**form, "name": "coder it 2", "check_failed": "", "agents": "coder", "iteration": "2"})
    assert list(AnnotationQueue.objects.get(name="coder it 2").items.values_list("target_ref", flat=True)) == ["4", "6"]
    nothing = c["rita"].post(url, {**form, "name": "none", "kinds": "tree_node"})
    assert nothing.status_code == 400 and "nothing" in nothing.content.decode()

    # the work page starts where this person left off and shows their progress
    r = c["anna"].get(f"/queues/{queue.pk}/work")
    assert r.status_code == 302 and r["Location"].endswith("?pos=1")
    page = c["anna"].get(f"/queues/{queue.pk}/work?pos=1").content.decode()
    assert "item <span id=\"qw-pos\">1</span> of 3" in page and "<kbd>1</kbd> wrong data path" in page
    assert c["vera"].get(f"/queues/{queue.pk}/work?pos=1").status_code == 403

    # anna and abel agree on "wrong data path" for two items, disagree on the third; abel skips nothing
    answers = {"anna": [["wrong data path"], ["wrong data path", "hallucinated value"], []],
               "abel": [["wrong data path"], ["hallucinated value"], ["wrong data path"]]}
    passes = {"anna": ["fail", "fail", "pass"], "abel": ["fail", "pass", "pass"]}
    for who in ("anna", "abel"):
        for pos in (1, 2, 3):
            r = _work(c[who], queue, pos, labels=answers[who][pos - 1], passed=passes[who][pos - 1])
            assert r.status_code == 201, r.content
        assert r.json()["next"] == f"/queues/{queue.pk}/"
    # a skip counts for progress but not for agreement
    r = _work(c["rita"], queue, 1, skip="1")
    assert r.status_code == 201 and r.json()["next"].endswith("?pos=2")
    assert Annotation.objects.get(author__username="rita", queue_item__position=1).skipped

    page = c["vera"].get(f"/queues/{queue.pk}/").content.decode()
    assert "Cohen" in page
    expected = cohen_kappa([True, True, False], [True, False, True])  # "wrong data path", present/absent
    assert f"{expected:.3f}" in page
    expected_pf = cohen_kappa([False, False, True], [False, True, True])
    assert f"{expected_pf:.3f}" in page
    assert page.count("<progress") >= 3  # anna, abel, rita


def test_export_and_import_round_trip_all_or_nothing(studio):
    run, c, ls, project = studio["run"], studio["c"], studio["ls"], studio["project"]
    _annotate(c["anna"], run, target_kind="event", target_ref="2", label_set=ls.pk, labels=["wrong data path"],
              passed="fail", comment="raw file")
    _annotate(c["abel"], run, target_kind="event", target_ref="6", label_set=ls.pk,
              labels=["hallucinated value", "good repair"], passed="pass")
    jsonl = c["vera"].get(f"/projects/{project.pk}/annotations/export?format=jsonl")
    assert jsonl.status_code == 200 and "attachment" in jsonl["Content-Disposition"]
    jsonl_body = b"".join(jsonl.streaming_content)  # streamed (issue 26 item 15)
    rows = [json.loads(line) for line in jsonl_body.decode().splitlines()]
    assert [(r["target_ref"], r["labels"], r["passed"], r["item_kind"], r["agent"]) for r in rows] == [
        ("2", ["wrong data path"], False, "check", "coder"), ("6", ["hallucinated value", "good repair"], True, "check", "coder")]
    csv_body = b"".join(c["vera"].get(f"/projects/{project.pk}/annotations/export?format=csv").streaming_content).decode()
    csv_rows = list(csv.DictReader(io.StringIO(csv_body)))
    assert csv_rows[1]["labels"] == "hallucinated value|good repair" and csv_rows[0]["passed"] == "fail"
    assert c["otto"].get(f"/projects/{project.pk}/annotations/export").status_code == 404

    # back in: the JSONL (a reviewer's import keeps each row's author) and the CSV (an annotator's
    # import is all in her own name: she cannot put words in a colleague's)
    imp = f"/projects/{project.pk}/annotations/import"
    r = c["rita"].post(imp, {"file": SimpleUploadedFile("labels.jsonl", jsonl_body)})
    assert r.status_code == 302
    r = c["anna"].post(imp, {"file": SimpleUploadedFile("labels.csv", csv_body.encode())})
    assert r.status_code == 302
    imported = Annotation.objects.exclude(source="").order_by("pk")
    assert [(a.target_ref, a.labels, a.passed, a.author.username, a.source) for a in imported] == [
        ("2", ["wrong data path"], False, "anna", "import:labels.jsonl"),
        ("6", ["hallucinated value", "good repair"], True, "abel", "import:labels.jsonl"),
        ("2", ["wrong data path"], False, "anna", "import:labels.csv"),
        ("6", ["hallucinated value", "good repair"], True, "anna", "import:labels.csv")]
    assert AuditEntry.objects.filter(action="import").count() == 2

    # one bad row among good ones: reported by line and column, nothing written
    n = Annotation.objects.count()
    lines = [json.dumps({"run": run.pk, "target_kind": "event", "target_ref": "1", "label_set": ls.name,
                         "labels": ["good repair"]}),
             json.dumps({"run": run.pk, "target_kind": "event", "target_ref": "77", "labels": []}),
             json.dumps({"run": run.pk, "target_kind": "event", "target_ref": "3", "label_set": ls.name,
                         "labels": ["typo"]})]
    r = c["anna"].post(imp, {"file": SimpleUploadedFile("bad.jsonl", "\n".join(lines).encode())})
    body = r.content.decode()
    assert r.status_code == 400 and "Nothing imported from bad.jsonl" in body
    assert "line 2, column target_ref" in body and "line 3, column labels" in body
    assert Annotation.objects.count() == n
    assert c["vera"].post(imp, {"file": SimpleUploadedFile("labels.jsonl", jsonl_body)}).status_code == 403


def test_the_cli_exports_and_imports(studio, tmp_path):
    run, c, ls, project = studio["run"], studio["c"], studio["ls"], studio["project"]
    _annotate(c["anna"], run, target_kind="event", target_ref="5", label_set=ls.pk, labels=["good repair"],
              passed="pass", comment="judge was right")
    out = tmp_path / "dataset.csv"
    call_command("annotations", "export", "--project", project.name, "-o", str(out))
    rows = list(csv.DictReader(out.open()))
    assert [(r["run"], r["target_ref"], r["labels"], r["comment"]) for r in rows] == [
        (str(run.pk), "5", "good repair", "judge was right")]
    call_command("annotations", "import", str(out), "--project", project.name, "--as", "rita")
    assert Annotation.objects.filter(source="import:dataset.csv", author__username="anna").count() == 1
    bad = tmp_path / "bad.csv"
    bad.write_text("run,target_kind,target_ref,labels\n999,event,1,good repair\n")
    with pytest.raises(CommandError, match="line 2, column run"):
        call_command("annotations", "import", str(bad), "--project", project.name, "--as", "rita",
                     "--label-set", ls.name)
    with pytest.raises(CommandError, match="no project"):
        call_command("annotations", "export", "--project", "nope")


def test_the_audit_log_page(studio):
    run, c, ls, project = studio["run"], studio["c"], studio["ls"], studio["project"]
    _annotate(c["anna"], run, target_kind="event", target_ref="2", label_set=ls.pk, labels=["wrong data path"])
    AuditEntry.objects.create(project=project, run=run, actor="user:rita", action="decision", detail={"mutation": 1})
    url = f"/projects/{project.pk}/audit"
    assert c["anna"].get(url).status_code == 403
    assert c["otto"].get(url).status_code == 404
    page = c["rita"].get(url).content.decode()
    assert "user:anna" in page and "user:rita" in page and "annotated" in page
    only = c["rita"].get(url + "?action=annotation").content.decode()
    assert "user:anna" in only and "decided a mutation" not in only.split("<tbody>")[1]


def test_three_annotators_get_fleiss_kappa(studio):
    from webapp.annotations.agreement import fleiss_kappa

    run, c, ls, project = studio["run"], studio["c"], studio["ls"], studio["project"]
    c["rita"].post(f"/projects/{project.pk}/queues", {"name": "All checks", "label_set": ls.pk, "kinds": "check"})
    queue = AnnotationQueue.objects.get()
    assert queue.items.count() == 3  # events 2, 4, 6
    marks = {"anna": [True, False, True], "abel": [True, False, False], "rita": [True, False, True]}
    for who, present in marks.items():
        for pos, on in enumerate(present, start=1):
            assert _work(c[who], queue, pos, labels=["wrong data path"] if on else [], comment="seen").status_code == 201
    page = c["anna"].get(f"/queues/{queue.pk}/").content.decode()
    expected = fleiss_kappa([[marks[w][i] for w in marks] for i in range(3)])
    assert "Fleiss" in page and f"{expected:.3f}" in page
    # export of just this queue carries each row's queue and position
    rows = [json.loads(x) for x in b"".join(c["anna"].get(
        f"/projects/{project.pk}/annotations/export?format=jsonl&queue={queue.pk}").streaming_content).decode().splitlines()]
    assert len(rows) == 9 and {(r["queue"], r["position"]) for r in rows} == {("All checks", p) for p in (1, 2, 3)}
