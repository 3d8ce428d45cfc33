"""Annotations, label sets and annotation queues (issue 13): the rules, apart from the views.

A person annotates one thing in a run (models.TARGET_KINDS): labels from one of the
project's label sets, a score on its scale or pass/fail, a comment; replies hang under an
annotation. A queue is the items of some runs that match a reviewer's filter, frozen into
QueueItem rows when it is made, so that every annotator works through the same list.
Export and import turn annotations into rows of a dataset (JSONL or CSV) and back."""
from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import dataclass
from itertools import islice
from typing import Any, BinaryIO, Iterable, Iterator

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import QuerySet

from webapp.runs import live
from webapp.runs.models import Event, Mutation, Run, WorkflowVersion
from webapp.runs.templatetags.studio import event_summary
from webapp.teams.models import Project, audit

from . import agreement
from .models import TARGET_KINDS, Annotation, AnnotationQueue, LabelSet, QueueItem, ScoreKind

KINDS = tuple(k for k, _ in TARGET_KINDS)
MAX_COMMENT = 5000
MAX_LABELS = 9          # keys 1..9 pick them in a queue
MAX_QUEUE_ITEMS = 2000  # a queue is worked through by hand


class AnnotationRefused(ValueError):
    """Bad input: nothing was written. ``http_status`` for the views."""

    def __init__(self, message: str, http_status: int = 400):
        super().__init__(message)
        self.http_status = http_status


# --- label sets -----------------------------------------------------------------------------

def parse_labels(text: str) -> list[str]:
    """Labels typed one a line (or comma-separated), trimmed, duplicates dropped, order kept."""
    seen: list[str] = []
    for part in re.split(r"[\n,]", text or ""):
        label = part.strip()
        if label and label not in seen:
            seen.append(label[:80])
    return seen


def save_label_set(project: Project, user, name: str, labels: list[str], score_kind: str,
                   scale_min: int = 1, scale_max: int = 5, label_set: LabelSet | None = None) -> LabelSet:
    name = (name or "").strip()
    if not name:
        raise AnnotationRefused("a label set needs a name")
    if not labels:
        raise AnnotationRefused("a label set needs at least one label")
    if len(labels) > MAX_LABELS:
        raise AnnotationRefused(f"at most {MAX_LABELS} labels (the keys 1-9 pick them), not {len(labels)}")
    if score_kind not in ScoreKind.values:
        raise AnnotationRefused(f"unknown score kind {score_kind!r}")
    if score_kind == ScoreKind.SCALE and scale_min >= scale_max:
        raise AnnotationRefused(f"the scale's minimum {scale_min} must be below its maximum {scale_max}")
    clash = LabelSet.objects.filter(project=project, name=name)
    if label_set is not None:
        clash = clash.exclude(pk=label_set.pk)
    if clash.exists():
        raise AnnotationRefused(f"{project.name} has a label set called {name!r} already", 409)
    row = label_set or LabelSet(project=project, created_by=user)
    row.name, row.labels, row.score_kind, row.scale_min, row.scale_max = name, labels, score_kind, scale_min, scale_max
    row.save()
    return row


# --- targets --------------------------------------------------------------------------------

def _ref_number(ref: str) -> int | None:
    """The number an event, mutation or version ref names; None when it names none (a number of
    more than 18 digits names nothing the database holds)."""
    return int(ref) if ref.isascii() and ref.isdigit() and len(ref) <= 18 else None


def target_exists(run: Run, kind: str, ref: str) -> bool:
    """Whether ``ref`` names something of that kind in this run. Artifacts and evidence records
    live in the run's folder, so only their key's shape is checked."""
    number = _ref_number(ref)
    if kind == "event":
        return number is not None and Event.objects.filter(run=run, seq=number).exists()
    if kind == "mutation":
        return number is not None and Mutation.objects.filter(run=run, pk=number).exists()
    if kind == "version":
        return number is not None and WorkflowVersion.objects.filter(run=run, number=number).exists()
    if kind == "artifact":
        return re.fullmatch(r"[0-9a-f]{64}", ref) is not None
    if kind == "evidence":
        return ref.isdigit()
    return False


def _describe_event(e: Event) -> dict[str, Any]:
    return {"title": f"event #{e.seq} · {e.kind}", "kind": e.kind, "agent": e.agent,
            "iteration": e.iteration, "summary": event_summary(e), "payload": e.payload}


def _describe_mutation(m: Mutation) -> dict[str, Any]:
    return {"title": f"mutation {m.pk} · iteration {m.iteration} · {m.kind} on {m.target}",
            "kind": m.kind, "agent": m.target, "iteration": m.iteration, "summary": m.rationale,
            "payload": {"status": m.status, "rule_accepts": m.rule_accepts, "evidence": m.evidence}}


def _describe_version(v: WorkflowVersion) -> dict[str, Any]:
    return {"title": f"version {v.number} by {v.author}", "kind": "version", "agent": v.author,
            "iteration": v.iteration, "summary": v.note, "payload": {"hash": v.hash}}


def _describe_other(kind: str, ref: str) -> dict[str, Any]:
    return {"title": f"{kind} {ref}", "kind": kind, "agent": "", "iteration": None, "summary": "", "payload": {}}


def describe_target(run: Run, kind: str, ref: str) -> dict[str, Any]:
    """What an annotator (and an exported row) sees of the item: a title and a few facts."""
    number = _ref_number(ref)
    if kind == "event" and number is not None:
        e = Event.objects.filter(run=run, seq=number).first()
        if e:
            return _describe_event(e)
    elif kind == "mutation" and number is not None:
        m = Mutation.objects.filter(run=run, pk=number).first()
        if m:
            return _describe_mutation(m)
    elif kind == "version" and number is not None:
        v = WorkflowVersion.objects.filter(run=run, number=number).first()
        if v:
            return _describe_version(v)
    return _describe_other(kind, ref)


# Looking many targets up at once: one query per run and kind (and per IN_BATCH of them), not one
# per target. Only the columns a description reads (a mutation's candidate workflow is large).
IN_BATCH = 900  # SQLite's oldest limit on a statement's parameters is 999
_LOOKUP = {
    "event": (Event, "seq", ("run_id", "seq", "kind", "agent", "iteration", "payload"), _describe_event),
    "mutation": (Mutation, "pk", ("run_id", "iteration", "kind", "target", "rationale", "status", "rule_accepts",
                                  "evidence"), _describe_mutation),
    "version": (WorkflowVersion, "number", ("run_id", "number", "author", "iteration", "note", "hash"), _describe_version),
}


def _found(kind: str, run_id: int, numbers: set[int]) -> Iterable:
    model, field, columns, _ = _LOOKUP[kind]
    ordered = sorted(numbers)
    for i in range(0, len(ordered), IN_BATCH):
        yield from model.objects.filter(run_id=run_id, **{f"{field}__in": ordered[i:i + IN_BATCH]}).only(*columns).order_by()


def _wanted(keys: Iterable[tuple[int, str, str]]) -> dict[tuple[str, int], set[int]]:
    wanted: dict[tuple[str, int], set[int]] = {}
    for run_id, kind, ref in keys:
        number = _ref_number(ref)
        if kind in _LOOKUP and number is not None:
            wanted.setdefault((kind, run_id), set()).add(number)
    return wanted


def existing_targets(keys: Iterable[tuple[int, str, str]]) -> set[tuple[int, str, str]]:
    """Those of (run id, kind, ref) that ``target_exists`` would say exist, looked up together."""
    keys = set(keys)
    found: set[tuple[int, str, int]] = set()
    for (kind, run_id), numbers in _wanted(keys).items():
        field = _LOOKUP[kind][1]
        found.update((run_id, kind, getattr(row, field)) for row in _found(kind, run_id, numbers))
    out = set()
    for run_id, kind, ref in keys:
        if kind in _LOOKUP:
            number = _ref_number(ref)
            if number is not None and (run_id, kind, number) in found:
                out.add((run_id, kind, ref))
        elif (kind == "artifact" and re.fullmatch(r"[0-9a-f]{64}", ref)) or (kind == "evidence" and ref.isdigit()):
            out.add((run_id, kind, ref))
    return out


def describe_targets(keys: Iterable[tuple[int, str, str]]) -> dict[tuple[int, str, str], dict[str, Any]]:
    """``describe_target`` of each (run id, kind, ref), looked up together."""
    keys = set(keys)
    by_number: dict[tuple[int, str, int], dict[str, Any]] = {}
    for (kind, run_id), numbers in _wanted(keys).items():
        _, field, _, describe = _LOOKUP[kind]
        for row in _found(kind, run_id, numbers):
            by_number[(run_id, kind, getattr(row, field))] = describe(row)
    out = {}
    for run_id, kind, ref in keys:
        number = _ref_number(ref)
        found = by_number.get((run_id, kind, number)) if number is not None else None
        out[(run_id, kind, ref)] = found or _describe_other(kind, ref)
    return out


# --- annotations ----------------------------------------------------------------------------

def _number(value: Any, what: str) -> float | None:
    if value in (None, ""):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        raise AnnotationRefused(f"{what} must be a number, not {value!r}") from None


def _passed(value: Any) -> bool | None:
    if value in (None, ""):
        return None
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("pass", "passed", "true", "yes", "1"):
        return True
    if text in ("fail", "failed", "false", "no", "0"):
        return False
    raise AnnotationRefused(f"pass/fail must be pass or fail, not {value!r}")


def checked_values(label_set: LabelSet | None, labels: Iterable[str], score: Any, passed: Any) -> tuple[list[str], float | None, bool | None]:
    """The labels, score and pass/fail an annotation may carry under ``label_set``."""
    labels = [str(x).strip() for x in labels if str(x).strip()]
    score_value, passed_value = _number(score, "the score"), _passed(passed)
    if label_set is None:
        if labels or score_value is not None or passed_value is not None:
            raise AnnotationRefused("labels and scores need a label set")
        return [], None, None
    unknown = [x for x in labels if x not in label_set.labels]
    if unknown:
        raise AnnotationRefused(f"{', '.join(map(repr, unknown))} not in label set {label_set.name!r} "
                                f"({', '.join(label_set.labels)})")
    if score_value is not None:
        if label_set.score_kind != ScoreKind.SCALE:
            raise AnnotationRefused(f"label set {label_set.name!r} has no score scale")
        if not label_set.scale_min <= score_value <= label_set.scale_max:
            raise AnnotationRefused(f"the score {score_value:g} is outside {label_set.scale_min}-{label_set.scale_max}")
    if passed_value is not None and label_set.score_kind != ScoreKind.PASS_FAIL:
        raise AnnotationRefused(f"label set {label_set.name!r} is not scored pass/fail")
    return labels, score_value, passed_value


def annotate(run: Run, user, target_kind: str, target_ref: str, *, label_set: LabelSet | None = None,
             labels: Iterable[str] = (), score: Any = None, passed: Any = None, comment: str = "",
             parent: Annotation | None = None, queue_item: QueueItem | None = None, skipped: bool = False,
             source: str = "", author=None, record: bool = True) -> Annotation:
    """Write one annotation (or a reply, or a queue skip); refuses bad input writing nothing."""
    comment = (comment or "").strip()
    if len(comment) > MAX_COMMENT:
        raise AnnotationRefused(f"a comment holds at most {MAX_COMMENT} characters, not {len(comment)}")
    if parent is not None:
        if parent.run_id != run.pk:
            raise AnnotationRefused("a reply must be in the annotation's run")
        if not comment:
            raise AnnotationRefused("a reply needs a comment")
        target_kind, target_ref, label_set = parent.target_kind, parent.target_ref, None
        labels, score, passed = (), None, None
    if target_kind not in KINDS:
        raise AnnotationRefused(f"unknown target kind {target_kind!r}: one of {', '.join(KINDS)}")
    target_ref = str(target_ref).strip()
    if not target_exists(run, target_kind, target_ref):
        raise AnnotationRefused(f"run {run.pk} has no {target_kind} {target_ref!r}", 404)
    if label_set is not None and label_set.project_id != run.task.project_id:
        raise AnnotationRefused("that label set belongs to another project")
    labels, score, passed = checked_values(label_set, labels, score, passed)
    if not skipped and parent is None and not (labels or score is not None or passed is not None or comment):
        raise AnnotationRefused("choose a label, a score or write a comment")
    row = Annotation.objects.create(
        run=run, target_kind=target_kind, target_ref=target_ref, label_set=label_set, labels=labels, score=score,
        passed=passed, comment=comment, parent=parent, queue_item=queue_item, skipped=skipped,
        author=author or user, source=source)
    if record and not skipped:
        audit(run.task.project, user, "annotation", run=run, annotation=row.pk, target=f"{target_kind} {target_ref}",
              reply_to=parent.pk if parent else None, labels=", ".join(labels),
              queue=f"{queue_item.queue.name} #{queue_item.position}" if queue_item else None)
    return row


def annotation_message(row: Annotation) -> dict:
    """What every viewer of the run is told: which target's list to fetch again."""
    return live.studio_message("annotation", annotation=row.pk, target_kind=row.target_kind,
                               target_ref=row.target_ref, parent=row.parent_id,
                               author=row.author.get_username() if row.author else "", labels=row.labels)


def thread(run: Run, target_kind: str, target_ref: str) -> list[Annotation]:
    """The target's annotations, oldest first, each with ``.thread`` (its replies, oldest first)."""
    rows = list(Annotation.objects.filter(run=run, target_kind=target_kind, target_ref=str(target_ref), skipped=False)
                .select_related("author", "label_set").order_by("created", "pk"))
    by_parent: dict[int | None, list[Annotation]] = {}
    for row in rows:
        by_parent.setdefault(row.parent_id, []).append(row)
    for row in rows:
        row.thread = by_parent.get(row.pk, [])
    return by_parent.get(None, [])


# --- queues ---------------------------------------------------------------------------------

def _failed(checks: Any) -> bool:
    return isinstance(checks, list) and any(isinstance(c, dict) and c.get("passed") is False for c in checks)


def event_failed_a_check(e: Event) -> bool:
    """A failed check, or a judgement or search step with a failed check among its checks (a
    row its kind's model refuses, from before payloads were typed, is not picked)."""
    if (p := e.typed) is None:
        return False
    if e.kind == "check":
        return p.passed is False
    return any(c.passed is False for c in getattr(p, "checks", None) or [])


def parse_filter(project: Project, data: dict) -> dict:
    """A queue's filter from a form or JSON; runs must be the project's."""
    def listed(key: str) -> list[str]:
        value = data.get(key) or []
        if isinstance(value, str):
            value = [v for v in re.split(r"[\s,]+", value) if v]
        return [str(v).strip() for v in value if str(v).strip()]

    runs = []
    for value in listed("runs"):
        if not value.isdigit():
            raise AnnotationRefused(f"run ids are numbers, not {value!r}")
        runs.append(int(value))
    known = set(Run.objects.filter(task__project=project, pk__in=runs).values_list("pk", flat=True))
    missing = [r for r in runs if r not in known]
    if missing:
        raise AnnotationRefused(f"{project.name} has no run {', '.join(map(str, missing))}")
    iteration = str(data.get("iteration") or "").strip()
    if iteration and not re.fullmatch(r"-?[0-9]{1,9}", iteration):
        raise AnnotationRefused(f"the iteration is a whole number, not {iteration!r}")
    target_kind = data.get("target_kind") or "event"
    if target_kind not in ("event", "mutation"):
        raise AnnotationRefused("a queue holds trace events or mutations")
    check = data.get("check_failed")
    return {"runs": runs, "agents": listed("agents"), "kinds": listed("kinds"),
            "check_failed": check in (True, "on", "true", "1", "yes"),
            "iteration": int(iteration) if iteration else None, "target_kind": target_kind}


def matching_items(project: Project, flt: dict) -> list[tuple[int, str, str]]:
    """(run id, target kind, target ref) of everything the filter picks, in run then trace order."""
    runs = Run.objects.filter(task__project=project)
    if flt.get("runs"):
        runs = runs.filter(pk__in=flt["runs"])
    out: list[tuple[int, str, str]] = []
    if flt.get("target_kind") == "mutation":
        qs = Mutation.objects.filter(run__in=runs).order_by("run_id", "iteration", "pk")
        if flt.get("agents"):
            qs = qs.filter(target__in=flt["agents"])
        if flt.get("kinds"):
            qs = qs.filter(kind__in=flt["kinds"])
        if flt.get("iteration") is not None:
            qs = qs.filter(iteration=flt["iteration"])
        for m in qs.iterator():
            if not flt.get("check_failed") or _failed((m.evidence or {}).get("checks")):
                out.append((m.run_id, "mutation", str(m.pk)))
        return out[:MAX_QUEUE_ITEMS]
    qs: QuerySet[Event] = Event.objects.filter(run__in=runs).order_by("run_id", "seq")
    if flt.get("agents"):
        qs = qs.filter(agent__in=flt["agents"])
    if flt.get("kinds"):
        qs = qs.filter(kind__in=flt["kinds"])
    if flt.get("iteration") is not None:
        qs = qs.filter(iteration=flt["iteration"])
    for e in qs.only("run_id", "seq", "kind", "payload").iterator():
        if not flt.get("check_failed") or event_failed_a_check(e):
            out.append((e.run_id, "event", str(e.seq)))
            if len(out) >= MAX_QUEUE_ITEMS:
                break
    return out


def make_queue(project: Project, user, name: str, label_set: LabelSet, flt: dict) -> AnnotationQueue:
    name = (name or "").strip()
    if not name:
        raise AnnotationRefused("a queue needs a name")
    if label_set.project_id != project.pk:
        raise AnnotationRefused("that label set belongs to another project")
    items = matching_items(project, flt)
    if not items:
        raise AnnotationRefused("nothing in the project's runs matches that filter")
    with transaction.atomic():
        queue = AnnotationQueue.objects.create(project=project, name=name, label_set=label_set, filter=flt,
                                               created_by=user)
        QueueItem.objects.bulk_create(QueueItem(queue=queue, position=i, run_id=run_id, target_kind=kind, target_ref=ref)
                                      for i, (run_id, kind, ref) in enumerate(items, start=1))
    return queue


def latest_by_annotator(queue: AnnotationQueue) -> dict[int, dict[str, Annotation]]:
    """Each item's (by id) latest annotation per annotator made through the queue, skips included."""
    out: dict[int, dict[str, Annotation]] = {}
    for row in (Annotation.objects.filter(queue_item__queue=queue, parent=None).select_related("author")
                .order_by("created", "pk")):
        who = row.author.get_username() if row.author else "?"
        out.setdefault(row.queue_item_id, {})[who] = row
    return out


def progress(queue: AnnotationQueue, user) -> dict[str, int]:
    total = queue.items.count()
    done = (Annotation.objects.filter(queue_item__queue=queue, author=user, parent=None)
            .values("queue_item").distinct().count())
    return {"total": total, "done": done, "left": total - done}


@dataclass
class Agreement:
    name: str          # a label, or "pass/fail", or "score"
    method: str        # cohen, fleiss, none
    kappa: float | None
    items: int
    words: str


def queue_agreement(queue: AnnotationQueue) -> tuple[list[Agreement], list[str]]:
    """Agreement per label (present or absent on an item) and on pass/fail, over the items
    annotated (not skipped) by at least two people; and who annotated."""
    latest = latest_by_annotator(queue)
    rated = {item: {who: a for who, a in per.items() if not a.skipped} for item, per in latest.items()}
    annotators = sorted({who for per in rated.values() for who in per})
    rows: list[Agreement] = []
    ls = queue.label_set
    for label in ls.labels:
        method, value, n = agreement.kappa({i: {w: label in a.labels for w, a in per.items()} for i, per in rated.items()})
        rows.append(Agreement(label, method, value, n, agreement.interpret(value)))
    if ls.score_kind == ScoreKind.PASS_FAIL:
        method, value, n = agreement.kappa({i: {w: a.passed for w, a in per.items() if a.passed is not None}
                                            for i, per in rated.items()})
        rows.append(Agreement("pass/fail", method, value, n, agreement.interpret(value)))
    elif ls.score_kind == ScoreKind.SCALE:
        # Scores as categories (unweighted kappa): an exact match agrees, anything else does not.
        method, value, n = agreement.kappa({i: {w: a.score for w, a in per.items() if a.score is not None}
                                            for i, per in rated.items()})
        rows.append(Agreement("score", method, value, n, agreement.interpret(value)))
    return rows, annotators


# --- export and import ----------------------------------------------------------------------

COLUMNS = ["annotation", "run", "target_kind", "target_ref", "item_kind", "agent", "iteration", "summary",
           "queue", "position", "label_set", "labels", "score", "passed", "comment", "reply_to", "skipped",
           "author", "created", "source"]
LABEL_SEP = "|"
EXPORT_CHUNK = 900         # annotations read (and their items looked up) at a time: one IN_BATCH
STREAM_PIECE = 64 * 1024   # characters of JSONL/CSV handed to the web server at a time


def iter_export_rows(annotations: QuerySet[Annotation], chunk_size: int = EXPORT_CHUNK) -> Iterator[dict[str, Any]]:
    """One row per annotation with what it was about (the item's kind, agent, iteration, summary),
    read ``chunk_size`` annotations at a time: a few queries per chunk (the annotations with their
    author, label set and queue; the items of each run), never one per row, and never the whole
    project in memory."""
    rows = annotations.select_related("author", "label_set", "queue_item__queue").order_by("run_id", "pk")
    source = rows.iterator(chunk_size=chunk_size)
    while batch := list(islice(source, chunk_size)):
        described = describe_targets((a.run_id, a.target_kind, a.target_ref) for a in batch)
        for a in batch:
            d = described[(a.run_id, a.target_kind, a.target_ref)]
            yield {"annotation": a.pk, "run": a.run_id, "target_kind": a.target_kind, "target_ref": a.target_ref,
                   "item_kind": d["kind"], "agent": d["agent"], "iteration": d["iteration"],
                   "summary": (d["summary"] or "")[:500],
                   "queue": a.queue_item.queue.name if a.queue_item else "",
                   "position": a.queue_item.position if a.queue_item else None,
                   "label_set": a.label_set.name if a.label_set else "", "labels": list(a.labels),
                   "score": a.score, "passed": a.passed, "comment": a.comment, "reply_to": a.parent_id,
                   "skipped": a.skipped, "author": a.author.get_username() if a.author else "",
                   "created": a.created.isoformat(), "source": a.source}


def export_rows(annotations: QuerySet[Annotation]) -> list[dict[str, Any]]:
    """``iter_export_rows`` as a list (for a few rows; a project's export is streamed)."""
    return list(iter_export_rows(annotations))


# A cell a spreadsheet would run as a formula (=HYPERLINK(...), @SUM(...), +cmd|...): written with a
# leading apostrophe, which spreadsheets show as text, and taken off again by the import (OWASP's
# advice for CSV injection).
FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\uff1d", "\uff0b", "\uff0d", "\uff20")


def spreadsheet_safe(value: object) -> object:
    if isinstance(value, str) and value.startswith(FORMULA_START):
        return "'" + value
    return value


def _from_spreadsheet(value: object) -> object:
    if isinstance(value, str) and value.startswith("'") and value[1:].startswith(FORMULA_START):
        return value[1:]
    return value


def _csv_row(r: dict) -> dict:
    return {k: spreadsheet_safe(v) for k, v in _csv_fields(r).items()}


def _csv_fields(r: dict) -> dict:
    return {**r, "labels": LABEL_SEP.join(r["labels"]),
            "passed": "" if r["passed"] is None else ("pass" if r["passed"] else "fail"),
            "score": "" if r["score"] is None else r["score"],
            "position": "" if r["position"] is None else r["position"],
            "reply_to": r["reply_to"] or "", "iteration": "" if r["iteration"] is None else r["iteration"]}


def jsonl_pieces(rows: Iterable[dict]) -> Iterator[str]:
    """JSON lines, in pieces of about STREAM_PIECE characters."""
    piece: list[str] = []
    size = 0
    for r in rows:
        line = json.dumps(r, ensure_ascii=False) + "\n"
        piece.append(line)
        size += len(line)
        if size >= STREAM_PIECE:
            yield "".join(piece)
            piece, size = [], 0
    if piece:
        yield "".join(piece)


def csv_pieces(rows: Iterable[dict]) -> Iterator[str]:
    """A header, then CSV rows, in pieces of about STREAM_PIECE characters."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=COLUMNS)
    writer.writeheader()
    for r in rows:
        writer.writerow(_csv_row(r))
        if out.tell() >= STREAM_PIECE:
            yield out.getvalue()
            out.seek(0)
            out.truncate()
    yield out.getvalue()


def to_jsonl(rows: Iterable[dict]) -> str:
    return "".join(jsonl_pieces(rows))


def to_csv(rows: Iterable[dict]) -> str:
    return "".join(csv_pieces(rows))


def export_stream(annotations: QuerySet[Annotation], fmt: str) -> Iterator[bytes]:
    """The export as UTF-8 bytes, piece by piece, for a streamed response: ``jsonl`` or ``csv``."""
    pieces = csv_pieces if fmt == "csv" else jsonl_pieces
    for piece in pieces(iter_export_rows(annotations)):
        yield piece.encode("utf-8")


def import_limits() -> dict[str, int]:
    """The caps on an import (webapp/settings.py): bytes and rows of one file, annotations of a project."""
    return {"max_bytes": settings.TRELLIS_ANNOTATION_IMPORT_MAX_BYTES,
            "max_rows": settings.TRELLIS_ANNOTATION_IMPORT_MAX_ROWS,
            "project_max_rows": settings.TRELLIS_ANNOTATION_PROJECT_MAX_ROWS}


class ImportFailed(ValueError):
    """Rows that cannot be imported, each named by line and column, or a file over a limit (then
    ``over_limit``); nothing was written. ``http_status`` for the views."""

    def __init__(self, filename: str, problems: list[str], http_status: int = 400, over_limit: bool = False):
        self.filename, self.problems, self.http_status, self.over_limit = filename, problems, http_status, over_limit
        super().__init__(f"{filename}: {len(problems)} bad row(s), nothing imported:\n" + "\n".join(problems[:50])
                         if not over_limit else f"{filename}: nothing imported: " + "; ".join(problems))


def too_big(filename: str, size: int, max_bytes: int) -> ImportFailed:
    return ImportFailed(filename, [f"{filename} is {size:,} bytes; an import takes at most {max_bytes:,} bytes "
                                   "(TRELLIS_ANNOTATION_IMPORT_MAX_BYTES): split it into smaller files"],
                        413, over_limit=True)


def _text_lines(filename: str, source: str | BinaryIO, max_bytes: int | None) -> Iterator[str]:
    """Lines of text, each with its line ending (LF, CRLF or CR), from a str or from a
    binary file (an upload's), which is read a few KiB at a time and decoded as UTF-8 (a BOM
    dropped) as it goes: never read whole."""
    if isinstance(source, str):
        text = io.StringIO(source, newline="")
    else:
        if source.seekable():
            source.seek(0)
        text = io.TextIOWrapper(source, encoding="utf-8-sig", newline="")
    n, seen = 0, 0
    try:
        while True:
            try:
                line = text.readline()
            except UnicodeDecodeError:
                raise ImportFailed(filename, [f"line {n + 1}: not UTF-8 text"]) from None
            if not line:
                return
            n += 1
            seen += len(line)  # characters: never more than the bytes they came from
            if max_bytes is not None and seen > max_bytes:
                raise too_big(filename, seen, max_bytes)
            yield line
    finally:
        if isinstance(text, io.TextIOWrapper):
            text.detach()  # the upload is Django's to close


def read_rows(filename: str, source: str | BinaryIO, max_bytes: int | None = None) -> Iterator[tuple[int, dict | str]]:
    """(line number, row) from JSONL or CSV, chosen by the file name (``.csv`` or else JSONL), as
    the file is read; a line that is no row gives (line number, what is wrong with it)."""
    lines = _text_lines(filename, source, max_bytes)
    if filename.lower().endswith(".csv"):
        reader = csv.DictReader(lines)
        try:
            fieldnames = reader.fieldnames or []
        except csv.Error as exc:
            raise ImportFailed(filename, [f"line 1: not CSV ({exc})"]) from None
        missing = [c for c in ("run", "target_kind", "target_ref") if c not in fieldnames]
        if missing:
            raise ImportFailed(filename, [f"line 1: missing column(s) {', '.join(missing)}"])
        while True:
            try:
                row = next(reader)
            except StopIteration:
                return
            except csv.Error as exc:
                yield reader.line_num, f"not CSV ({exc})"
                return  # the reader cannot go on past a broken field
            row = {k: _from_spreadsheet(v) for k, v in row.items()}
            labels = (row.get("labels") or "").strip()
            yield reader.line_num, {**row, "labels": [x for x in labels.split(LABEL_SEP) if x.strip()]}
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            yield n, f"not JSON ({exc.msg})"
            continue
        except RecursionError:
            yield n, "not an annotation: its JSON is nested too deeply"
            continue
        yield n, row if isinstance(row, dict) else "not a JSON object"


IMPORTED = ("label_set", "labels", "score", "passed", "comment", "author")  # besides run and target


def project_annotations(project: Project) -> int:
    return Annotation.objects.filter(run__task__project=project).count()


def _project_full(filename: str, project: Project, held: int, cap: int, why: str) -> ImportFailed:
    return ImportFailed(filename, [f"{why}: {project.name} holds {held:,} annotation(s) and may hold at most {cap:,} "
                                   "(TRELLIS_ANNOTATION_PROJECT_MAX_ROWS)"], 409, over_limit=True)


def import_rows(project: Project, user, filename: str, source: str | BinaryIO,
                default_label_set: LabelSet | None = None, keep_authors: bool = False,
                limits: dict[str, int] | None = None) -> list[Annotation]:
    """Labels from another tool (or an export), matched to the project's runs by run + target.
    ``source`` is the file's text or the file (binary: an upload's ``.file``), read as a stream. Every row is checked first; any bad row is reported and nothing is written. Refused,
    writing nothing, as soon as the file is over ``limits`` (``import_limits()``): its bytes, its
    rows (the row that crossed it is named) or the project's annotations. A row's ``author`` is
    kept (when such a user exists) only with ``keep_authors`` (reviewers and the CLI): otherwise an
    annotator could put words in a colleague's name; the importer is the author of the rest."""
    limits = limits or import_limits()
    max_rows, cap = limits["max_rows"], limits["project_max_rows"]
    held = project_annotations(project)
    if held >= cap:
        raise _project_full(filename, project, held, cap, "nothing more can be imported")
    label_sets = {ls.name: ls for ls in project.label_sets.all()}
    runs = {r.pk: r for r in Run.objects.filter(task__project=project).select_related("task")}
    problems: list[tuple[int, str]] = []   # (line, what is wrong): each bad row once, reported in line order
    checked: list[tuple[int, Run, str, str, dict]] = []    # rows whose run and target kind are right
    count = 0
    for line, row in read_rows(filename, source, limits["max_bytes"]):
        count += 1
        if count > max_rows:
            raise ImportFailed(filename, [f"line {line}: row {count:,} is over the limit of {max_rows:,} rows per import "
                                          "(TRELLIS_ANNOTATION_IMPORT_MAX_ROWS): split the file"], 413, over_limit=True)
        if held + count > cap:
            raise _project_full(filename, project, held, cap,
                                f"line {line}: row {count:,} would be the project's annotation {held + count:,}")
        if isinstance(row, str):
            problems.append((line, f"line {line}: {row}"))
            continue
        run_id = str(row.get("run", "")).strip()
        run = runs.get(int(run_id)) if run_id.isascii() and run_id.isdigit() and len(run_id) <= 18 else None
        if run is None:
            problems.append((line, f"line {line}, column run: {project.name} has no run {run_id[:40]!r}"))
            continue
        kind, ref = str(row.get("target_kind", "")).strip(), str(row.get("target_ref", "")).strip()
        if kind not in KINDS:
            problems.append((line, f"line {line}, column target_kind: {kind[:40]!r} is not one of {', '.join(KINDS)}"))
            continue
        # only what the second pass reads (an export's row carries twenty columns, its summary among them)
        checked.append((line, run, kind, ref, {k: row.get(k) for k in IMPORTED if row.get(k) is not None}))
    if not checked and not problems:
        raise ImportFailed(filename, ["no rows"])

    # The targets of every row, looked up together; then each row's labels, score and comment.
    exist = existing_targets((run.pk, kind, ref) for _, run, kind, ref, _ in checked)
    users = get_user_model().objects
    authors: dict[str, Any] = {}
    planned: list[dict] = []
    for line, run, kind, ref, row in checked:
        def bad(column: str, why: str) -> None:
            problems.append((line, f"line {line}, column {column}: {why}"))

        if (run.pk, kind, ref) not in exist:
            bad("target_ref", f"run {run.pk} has no {kind} {ref[:40]!r}")
            continue
        ls_name = str(row.get("label_set") or "").strip()
        label_set = label_sets.get(ls_name) if ls_name else default_label_set
        if ls_name and label_set is None:
            bad("label_set", f"{project.name} has no label set {ls_name[:80]!r}")
            continue
        labels = row.get("labels") or []
        if isinstance(labels, str):
            labels = [x for x in labels.split(LABEL_SEP) if x.strip()]
        if not isinstance(labels, list):
            bad("labels", "labels are a list (or separated by |)")
            continue
        try:
            labels, score, passed = checked_values(label_set, labels, row.get("score"), row.get("passed"))
        except AnnotationRefused as exc:
            column = "labels" if "label" in str(exc) else ("passed" if "pass" in str(exc) else "score")
            bad(column, str(exc))
            continue
        comment = str(row.get("comment") or "").strip()
        if not (labels or score is not None or passed is not None or comment):
            bad("labels", "no label, score, pass/fail or comment")
            continue
        author_name = str(row.get("author") or "").strip() if keep_authors else ""
        if author_name and author_name not in authors:
            authors[author_name] = users.filter(username=author_name).first()
        planned.append(dict(run=run, target_kind=kind, target_ref=ref, label_set=label_set, labels=labels,
                            score=score, passed=passed, comment=comment[:MAX_COMMENT],
                            author=authors.get(author_name) or user))
    if problems:
        raise ImportFailed(filename, [why for _, why in sorted(problems, key=lambda p: p[0])])
    source_name = f"import:{filename}"[:120]
    with transaction.atomic():
        # Held again where the write is (one import at a time per project on PostgreSQL; SQLite's
        # IMMEDIATE transactions hold every writer): two imports at once cannot pass the cap together.
        Project.objects.select_for_update().filter(pk=project.pk).first()
        held = project_annotations(project)
        if held + len(planned) > cap:
            raise _project_full(filename, project, held, cap, f"its {len(planned):,} row(s) would make {held + len(planned):,}")
        made = Annotation.objects.bulk_create([Annotation(**p, source=source_name) for p in planned], batch_size=500)
        audit(project, user, "import", file=filename, rows=len(made),
              runs=", ".join(str(r) for r in sorted({p["run"].pk for p in planned})))
    return made
