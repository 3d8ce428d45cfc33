"""Issue 26 item 15: an annotator imported 100,000 annotations (8 MB, read whole into memory) and
the project's export then took 238 s. Now an import is read as a stream and refused, with nothing
saved, when the file is over the byte cap (before any of it is read), has more rows than an import
may (naming the row that crossed), or would take the project over its cap; and the export is
streamed with a few queries per chunk of rows, not one per row (it looked each row's item up).

Django's test client against the database, uploads through Django's own multipart parser; the
upload's file is a guarded one that refuses to be read whole."""
from __future__ import annotations

import csv
import io
import json

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.files.uploadhandler import MemoryFileUploadHandler, StopFutureHandlers
from django.db import connection
from django.http import StreamingHttpResponse
from django.test import AsyncClient, Client
from django.test.utils import CaptureQueriesContext

from tests.studio_harness import add_member, proposed_mutation, running_run
from webapp.annotations.models import Annotation, AnnotationQueue, LabelSet, QueueItem
from webapp.runs.models import Event, Mutation
from webapp.teams.models import AuditEntry

pytestmark = pytest.mark.django_db

LABELS = ["wrong data path", "hallucinated value", "good repair"]
EVENTS = 2100


class GuardedFile(io.BytesIO):
    """An uploaded file's bytes that may be read a piece at a time but never whole."""

    sizes: list[int] = []  # what each read returned (class-wide: the view's upload is made by Django)

    def _piece(self, data: bytes) -> bytes:
        GuardedFile.sizes.append(len(data))
        return data

    def read(self, size=-1):
        if size is None or size < 0:
            raise AssertionError("the upload was read whole: read() without a size")
        return self._piece(super().read(size))

    def read1(self, size=-1):
        if size is None or size < 0:
            raise AssertionError("the upload was read whole: read1() without a size")
        return self._piece(super().read1(size))

    def readline(self, size=-1):
        return self._piece(super().readline(size))

    def readinto(self, b):
        n = super().readinto(b)
        GuardedFile.sizes.append(n)
        return n

    def getvalue(self):
        raise AssertionError("the upload was read whole: getvalue()")

    def readlines(self, hint=-1):
        raise AssertionError("the upload was read whole: readlines()")


class GuardedUploadHandler(MemoryFileUploadHandler):
    """Django's in-memory upload handler, keeping the bytes in a GuardedFile."""

    def new_file(self, *args, **kwargs):
        try:
            super().new_file(*args, **kwargs)
        except StopFutureHandlers:  # raised once it has taken the file (as it does for small uploads)
            self.file = GuardedFile()
            raise
        raise AssertionError("the test's uploads are small enough to be kept in memory")


GUARDED = ["tests.adversarial.test_annotation_import_caps.GuardedUploadHandler"]


@pytest.fixture
def studio(light_task, settings):
    """A run with EVENTS trace events, a mutation and a version; a pass/fail label set; a reviewer
    and an annotator signed in; uploads kept in guarded files."""
    settings.FILE_UPLOAD_HANDLERS = GUARDED
    GuardedFile.sizes = []
    run = running_run(light_task, "Import caps")
    project = run.task.project
    Event.objects.bulk_create(Event(run=run, seq=s, source="r", source_seq=s, ts=1000.0 + s, kind="check",
                                    agent="coder", iteration=s // 100,
                                    payload={"name": f"check {s}", "passed": s % 2 == 0, "detail": "negative age"})
                              for s in range(1, EVENTS + 1))
    users = get_user_model().objects
    clients = {}
    for name, role in (("rita", "reviewer"), ("anna", "annotator")):
        user = users.create_user(name, password="pw-" + name)
        add_member(project, user, role)
        clients[name] = Client()
        clients[name].force_login(user)
    ls = LabelSet.objects.create(project=project, name="Failure modes", labels=LABELS, score_kind="pass_fail")
    return {"run": run, "project": project, "c": clients, "ls": ls, "url": f"/projects/{project.pk}/annotations/import"}


def _rows(run, n: int, first_seq: int = 1) -> list[dict]:
    return [{"run": run.pk, "target_kind": "event", "target_ref": str(first_seq + i), "label_set": "Failure modes",
             "labels": [LABELS[i % 3]], "passed": "fail" if i % 2 else "pass", "comment": f"row {i}"}
            for i in range(n)]


def _jsonl(rows: list[dict]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def _upload(client, url, name: str, body: bytes):
    return client.post(url, {"file": SimpleUploadedFile(name, body)})


def _page(response) -> str:
    return response.content.decode()


# --- import ---------------------------------------------------------------------------------

def test_an_import_over_the_row_cap_is_refused_naming_the_row_and_saves_nothing(studio, settings):
    settings.TRELLIS_ANNOTATION_IMPORT_MAX_ROWS = 5
    run, c, url = studio["run"], studio["c"], studio["url"]
    # Eight good rows, then a line that is not JSON: the import stops at the row that crossed the
    # cap (row 6, line 7 after a blank line), so the broken line 10 is never read.
    lines = [json.dumps(r) for r in _rows(run, 8)]
    lines.insert(2, "")
    body = ("\n".join(lines) + "\n{broken\n").encode()
    r = _upload(c["anna"], url, "many.jsonl", body)
    page = _page(r)
    assert r.status_code == 413
    assert "Nothing imported from many.jsonl" in page
    assert "line 7: row 6 is over the limit of 5 rows per import" in page
    assert "TRELLIS_ANNOTATION_IMPORT_MAX_ROWS" in page and "not JSON" not in page
    assert not Annotation.objects.exists() and not AuditEntry.objects.filter(action="import").exists()

    # At the cap exactly, the file goes in.
    r = _upload(c["anna"], url, "five.jsonl", _jsonl(_rows(run, 5)))
    assert r.status_code == 302 and Annotation.objects.count() == 5


def test_an_import_that_would_take_the_project_over_its_cap_is_refused(studio, settings):
    settings.TRELLIS_ANNOTATION_PROJECT_MAX_ROWS = 10
    run, c, url, ls = studio["run"], studio["c"], studio["url"], studio["ls"]
    Annotation.objects.bulk_create(Annotation(run=run, target_kind="event", target_ref=str(s), label_set=ls,
                                              labels=["good repair"]) for s in range(1, 8))
    # 7 held + 4 rows: the fourth row would be the project's 11th annotation.
    r = _upload(c["rita"], url, "four.jsonl", _jsonl(_rows(run, 4, first_seq=100)))
    page = _page(r)
    assert r.status_code == 409
    assert "line 4: row 4 would be the project&#x27;s annotation 11" in page
    assert "Import caps holds 7 annotation(s) and may hold at most 10" in page
    assert "TRELLIS_ANNOTATION_PROJECT_MAX_ROWS" in page
    assert Annotation.objects.count() == 7

    # Three rows fill it exactly; after that nothing more goes in, whatever the file.
    assert _upload(c["rita"], url, "three.jsonl", _jsonl(_rows(run, 3, first_seq=100))).status_code == 302
    assert Annotation.objects.count() == 10
    r = _upload(c["rita"], url, "one.jsonl", _jsonl(_rows(run, 1, first_seq=200)))
    assert r.status_code == 409 and "nothing more can be imported" in _page(r)
    assert Annotation.objects.count() == 10


def test_an_oversize_upload_is_refused_before_any_of_it_is_read(studio, settings):
    settings.TRELLIS_ANNOTATION_IMPORT_MAX_BYTES = 1000
    run, c, url = studio["run"], studio["c"], studio["url"]
    body = _jsonl(_rows(run, 40))
    assert len(body) > 1000
    r = _upload(c["anna"], url, "big.jsonl", body)
    page = _page(r)
    assert r.status_code == 413
    assert f"big.jsonl is {len(body):,} bytes; an import takes at most 1,000 bytes" in page
    assert GuardedFile.sizes == [], "the oversize upload was read"
    assert not Annotation.objects.exists()


def test_an_import_reads_the_upload_a_piece_at_a_time(studio):
    run, c, url = studio["run"], studio["c"], studio["url"]
    body = _jsonl(_rows(run, 2000))
    assert len(body) > 200_000
    r = _upload(c["rita"], url, "labels.jsonl", body)
    assert r.status_code == 302, _page(r)
    assert Annotation.objects.filter(source="import:labels.jsonl").count() == 2000
    assert GuardedFile.sizes and max(GuardedFile.sizes) <= 64 * 1024, "the upload was read in one piece"


def test_a_streamed_csv_import_keeps_its_rows_and_its_row_errors(studio, settings):
    """CSV read line by line: a BOM, CRLF line ends, a quoted comment over two lines; a bad row
    still named by line and column; a file on disk (over Django's in-memory size) as well."""
    run, c, url = studio["run"], studio["c"], studio["url"]
    good = ("\ufeffrun,target_kind,target_ref,label_set,labels,passed,comment\r\n"
            f'{run.pk},event,2,Failure modes,good repair|wrong data path,pass,"two\r\nlines"\r\n'
            f"{run.pk},event,3,Failure modes,hallucinated value,fail,\r\n").encode()
    assert _upload(c["anna"], url, "labels.csv", good).status_code == 302
    rows = list(Annotation.objects.order_by("target_ref").values_list("target_ref", "labels", "passed", "comment"))
    assert rows == [("2", ["good repair", "wrong data path"], True, "two\r\nlines"),
                    ("3", ["hallucinated value"], False, "")]
    bad = (f"run,target_kind,target_ref,label_set,labels\n{run.pk},event,4,Failure modes,typo\n"
           f"{run.pk},event,99999,Failure modes,good repair\n999,event,1,,\n").encode()
    r = _upload(c["anna"], url, "bad.csv", bad)
    page = _page(r)
    assert r.status_code == 400
    assert page.index("line 2, column labels") < page.index("line 3, column target_ref") < page.index("line 4, column run")
    r = _upload(c["anna"], url, "latin.jsonl", b'{"comment": "caf\xe9"}\n')
    assert r.status_code == 400 and "line 1: not UTF-8 text" in _page(r)
    assert Annotation.objects.count() == 2

    settings.FILE_UPLOAD_HANDLERS = ["django.core.files.uploadhandler.TemporaryFileUploadHandler"]
    assert _upload(c["anna"], url, "disk.jsonl", _jsonl(_rows(run, 50, first_seq=10))).status_code == 302
    assert Annotation.objects.filter(source="import:disk.jsonl").count() == 50


# --- export ---------------------------------------------------------------------------------

def _annotate_many(studio, n: int) -> None:
    """n annotations, each of a trace event of its own (the item of every row must be looked up),
    with replies, a mutation's, a version's and a queue's among them."""
    run, ls, project = studio["run"], studio["ls"], studio["project"]
    rita = get_user_model().objects.get(username="rita")
    made = Annotation.objects.bulk_create(
        Annotation(run=run, target_kind="event", target_ref=str(s), label_set=ls, labels=[LABELS[s % 3]],
                   passed=s % 2 == 0, comment=f"event {s}", author=rita) for s in range(1, n - 3))
    queue, _ = AnnotationQueue.objects.get_or_create(project=project, name="Checks", label_set=ls, filter={},
                                                     created_by=rita)
    item, _ = QueueItem.objects.get_or_create(queue=queue, position=1, run=run, target_kind="event", target_ref="1")
    mutation = Mutation.objects.filter(run=run).first() or proposed_mutation(run)
    Annotation.objects.create(run=run, target_kind="event", target_ref="1", comment="reply", parent=made[0], author=rita)
    Annotation.objects.create(run=run, target_kind="event", target_ref="1", labels=["good repair"], label_set=ls,
                              queue_item=item, author=rita)
    Annotation.objects.create(run=run, target_kind="mutation", target_ref=str(mutation.pk), comment="risky", author=rita)
    Annotation.objects.create(run=run, target_kind="version", target_ref="1", comment="initial", author=rita)
    assert Annotation.objects.count() == n


def _export(client, project, fmt: str) -> tuple[StreamingHttpResponse, bytes, int, bool]:
    """The export, its body read piece by piece, the queries it took, and whether any annotation
    had been read when the view answered (it must not have: the rows are read as they are sent)."""
    with CaptureQueriesContext(connection) as queries:
        r = client.get(f"/projects/{project.pk}/annotations/export?format={fmt}")
        read_before = any('"runs_annotation"' in q["sql"] for q in queries.captured_queries)
        body = b"".join(r.streaming_content) if r.streaming else r.content
    return r, body, len(queries.captured_queries), read_before


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_the_export_is_streamed_with_a_bounded_number_of_queries(studio, fmt, django_assert_max_num_queries):
    project, reviewer = studio["project"], studio["c"]["rita"]
    _annotate_many(studio, 100)
    small, small_body, small_queries, read_before = _export(reviewer, project, fmt)
    assert isinstance(small, StreamingHttpResponse) and small.status_code == 200
    assert not read_before, "the annotations were read before the response was returned: not streamed"

    Annotation.objects.all().delete()
    _annotate_many(studio, 2000)
    with django_assert_max_num_queries(30):
        big, body, big_queries, _ = _export(reviewer, project, fmt)
    assert isinstance(big, StreamingHttpResponse)
    assert 'attachment; filename="annotations-' in big["Content-Disposition"]
    # Twenty times the rows: a few more queries (one chunk of rows and their items per 900), not 1,900.
    assert big_queries <= small_queries + 8, (small_queries, big_queries)

    text = body.decode()
    if fmt == "jsonl":
        rows = [json.loads(line) for line in text.splitlines()]
    else:
        rows = list(csv.DictReader(io.StringIO(text)))
    assert len(rows) == 2000
    by_ref = {(r["target_kind"], r["target_ref"], r["comment"]): r for r in rows}
    event = by_ref[("event", "7", "event 7")]
    assert (event["item_kind"], event["agent"], str(event["iteration"])) == ("check", "coder", "0")
    assert event["summary"] == "FAIL check 7: negative age"
    mutation = next(r for r in rows if r["target_kind"] == "mutation")
    assert (mutation["item_kind"], mutation["agent"], mutation["comment"]) == ("prompt_refinement", "coder", "risky")
    assert by_ref[("version", "1", "initial")]["item_kind"] == "version"
    assert str(by_ref[("event", "1", "reply")]["reply_to"]) == str(Annotation.objects.order_by("pk").first().pk)
    queued = next(r for r in rows if r["queue"])
    assert (queued["queue"], str(queued["position"])) == ("Checks", "1")


def test_under_asgi_the_export_streams_asynchronously_and_says_the_same(studio):
    """Daphne serves the studio: given a plain iterator, Django's ASGI handler would make the whole
    export into a list before sending a byte. The view gives it an asynchronous one."""
    project = studio["project"]
    _annotate_many(studio, 1000)
    sync_body = b"".join(studio["c"]["rita"].get(f"/projects/{project.pk}/annotations/export?format=jsonl").streaming_content)

    async def fetch():
        client = AsyncClient()
        await client.aforce_login(await get_user_model().objects.aget(username="rita"))
        r = await client.get(f"/projects/{project.pk}/annotations/export?format=jsonl")
        pieces = [piece async for piece in r.streaming_content]
        return r, pieces

    r, pieces = async_to_sync(fetch)()
    assert isinstance(r, StreamingHttpResponse) and r.is_async
    assert len(pieces) > 1 and b"".join(pieces) == sync_body
    assert len(sync_body.splitlines()) == 1000
