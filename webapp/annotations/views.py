"""Pages of team annotation (issue 13): a target's annotations (inline in the trace viewer and
beside mutations), the project's label sets, annotation queues and working through one, the
agreement of its annotators, export/import of the annotations, and the project's audit log.

Access as everywhere (webapp/runs/access.py): viewers read, annotators annotate, reviewers
manage label sets and queues and read the audit log; outsiders get 404."""
from __future__ import annotations

from typing import AsyncIterator, Iterator

from asgiref.sync import sync_to_async
from django.contrib import messages
from django.core.handlers.asgi import ASGIRequest
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from webapp.runs import visibility
from webapp.runs.bridge import broadcast
from webapp.teams import access

from . import annotating as ann
from .models import Annotation, AnnotationQueue, LabelSet, QueueItem, ScoreKind

SHOWN_PROBLEMS = 200  # of a refused import's bad rows, listed on the page (all are counted)


def _queue_for(user, queue_id: int, min_role) -> tuple[AnnotationQueue, object]:
    queue = AnnotationQueue.objects.select_related("project", "label_set").filter(pk=queue_id).first()
    if queue is None:
        raise Http404("no such queue")
    _, role = access.project_for(user, queue.project_id, min_role)
    return queue, role


def _list_context(run, role, kind: str, ref: str) -> dict:
    return {"run": run, "target_kind": kind, "target_ref": ref, "thread": ann.thread(run, kind, ref),
            "label_sets": list(run.task.project.label_sets.all()), "can": access.abilities(role)}


@require_http_methods(["GET", "POST"])
def target_annotations(request: HttpRequest, run_id: int) -> HttpResponse:
    """GET: a target's annotations with their replies (and the form, for annotators). POST: a new
    annotation or reply, broadcast to everyone watching the run; answers the list again."""
    post = request.method == "POST"
    run, role = visibility.run_for(request.user, run_id, access.ANNOTATE if post else access.VIEW)
    data = request.POST if post else request.GET
    kind, ref = data.get("target_kind", ""), data.get("target_ref", "")
    if kind not in ann.KINDS:
        return HttpResponse(f'<p class="error">unknown target kind {kind!r}</p>', status=400)
    error, status = None, 200
    if post:
        try:
            parent = None
            if data.get("parent"):
                parent = Annotation.objects.filter(pk=data["parent"] if data["parent"].isdigit() else 0, run=run).first()
                if parent is None:
                    raise ann.AnnotationRefused("no such annotation to reply to", 404)
            label_set = None
            if data.get("label_set") and not parent:
                label_set = LabelSet.objects.filter(pk=data["label_set"] if data["label_set"].isdigit() else 0,
                                                    project=run.task.project).first()
                if label_set is None:
                    raise ann.AnnotationRefused("no such label set in this project")
            row = ann.annotate(run, request.user, kind, ref, label_set=label_set, labels=data.getlist("labels"),
                               score=data.get("score"), passed=data.get("passed"), comment=data.get("comment", ""),
                               parent=parent)
            broadcast(run, ann.annotation_message(row))
            status = 201
            kind, ref = row.target_kind, row.target_ref
        except ann.AnnotationRefused as exc:
            error, status = str(exc), exc.http_status
    elif not ann.target_exists(run, kind, ref):
        raise Http404(f"run {run.pk} has no {kind} {ref!r}")
    context = {**_list_context(run, role, kind, ref), "error": error}
    # htmx swaps 2xx only (base.html): a refusal is shown in the form, its status kept for clients.
    response = render(request, "annotations/annotation_list.html", context, status=200 if request.headers.get("HX-Request") else status)
    if error and request.headers.get("HX-Request"):
        response["X-Annotation-Error"] = str(status)
    return response


@require_http_methods(["GET", "POST"])
def label_sets(request: HttpRequest, project_id: int) -> HttpResponse:
    post = request.method == "POST"
    project, role = access.project_for(request.user, project_id, access.REVIEW if post else access.VIEW)
    error, status = None, 200
    if post:
        editing = None
        if request.POST.get("id"):
            editing = LabelSet.objects.filter(pk=request.POST["id"] if request.POST["id"].isdigit() else 0,
                                              project=project).first()
            if editing is None:
                raise Http404("no such label set")
        try:
            lo, hi = int(request.POST.get("scale_min") or 1), int(request.POST.get("scale_max") or 5)
        except ValueError:
            lo, hi = 0, 0
        try:
            row = ann.save_label_set(project, request.user, request.POST.get("name", ""),
                                     ann.parse_labels(request.POST.get("labels", "")),
                                     request.POST.get("score_kind", ScoreKind.NONE), lo, hi, editing)
            messages.success(request, f"label set {row.name!r} saved")
            return redirect("label_sets", project_id=project.pk)
        except ann.AnnotationRefused as exc:
            error, status = str(exc), exc.http_status
    return render(request, "annotations/label_sets.html", {
        "project": project, "label_sets": project.label_sets.all(), "score_kinds": ScoreKind.choices,
        "can": access.abilities(role), "error": error, "posted": request.POST if post else None}, status=status)


@require_http_methods(["GET", "POST"])
def queues(request: HttpRequest, project_id: int) -> HttpResponse:
    """The project's queues, a form to define one (reviewers), export and import."""
    post = request.method == "POST"
    project, role = access.project_for(request.user, project_id, access.REVIEW if post else access.VIEW)
    error, status = None, 200
    if post:
        try:
            ls = LabelSet.objects.filter(project=project, pk=request.POST.get("label_set") or 0).first() \
                if (request.POST.get("label_set") or "").isdigit() else None
            if ls is None:
                raise ann.AnnotationRefused("choose one of the project's label sets")
            queue = ann.make_queue(project, request.user, request.POST.get("name", ""), ls,
                                   ann.parse_filter(project, request.POST.dict() | {"runs": request.POST.getlist("runs")}))
            messages.success(request, f"queue {queue.name!r}: {queue.items.count()} items")
            return redirect("annotation_queue", queue_id=queue.pk)
        except ann.AnnotationRefused as exc:
            error, status = str(exc), exc.http_status
    rows = []
    for q in project.queues.select_related("label_set"):
        q.progress = ann.progress(q, request.user)
        rows.append(q)
    runs = project.tasks.prefetch_related("runs")
    return render(request, "annotations/queues.html", {
        "project": project, "queues": rows, "label_sets": project.label_sets.all(), "can": access.abilities(role),
        "tasks": runs, "error": error, "posted": request.POST if post else None,
        "import_limits": ann.import_limits()}, status=status)


def queue_page(request: HttpRequest, queue_id: int) -> HttpResponse:
    """A queue: its filter, everyone's progress, the agreement of its annotators, its items."""
    queue, role = _queue_for(request.user, queue_id, access.VIEW)
    latest = ann.latest_by_annotator(queue)
    rows, annotators = ann.queue_agreement(queue)
    per_person = {who: sum(1 for per in latest.values() if who in per) for who in
                  sorted({w for per in latest.values() for w in per})}
    items = list(queue.items.select_related("run")[:500])
    for item in items:
        item.by = latest.get(item.pk, {})
    return render(request, "annotations/queue.html", {
        "queue": queue, "project": queue.project, "agreement": rows, "annotators": annotators, "items": items,
        "total": queue.items.count(), "per_person": per_person, "mine": ann.progress(queue, request.user),
        "can": access.abilities(role)})


def queue_work(request: HttpRequest, queue_id: int) -> HttpResponse:
    """One item of the queue for an annotator, worked with the keyboard (static/js/annotate.js)."""
    queue, role = _queue_for(request.user, queue_id, access.ANNOTATE)
    total = queue.items.count()
    pos = request.GET.get("pos", "")
    if not pos.isdigit():
        # Where this person left off: their first item not yet annotated or skipped.
        done = Annotation.objects.filter(queue_item__queue=queue, author=request.user, parent=None).values("queue_item")
        first = queue.items.exclude(pk__in=done).order_by("position").first()
        return redirect(reverse("queue_work", args=[queue.pk]) + f"?pos={first.position if first else 1}")
    item = queue.items.select_related("run__task").filter(position=int(pos)).first()
    if item is None:
        raise Http404(f"queue {queue.name!r} has items 1-{total}")
    mine = (Annotation.objects.filter(queue_item=item, author=request.user, parent=None).order_by("-created", "-pk").first())
    return render(request, "annotations/queue_work.html", {
        "queue": queue, "project": queue.project, "item": item, "total": total, "mine": mine,
        "target": ann.describe_target(item.run, item.target_kind, item.target_ref),
        "progress": ann.progress(queue, request.user), "label_set": queue.label_set,
        "keyed": [(i + 1, label) for i, label in enumerate(queue.label_set.labels)],
        "scale": range(queue.label_set.scale_min, queue.label_set.scale_max + 1),
        "can": access.abilities(role)})


@require_POST
def queue_save(request: HttpRequest, queue_id: int, position: int) -> JsonResponse:
    """Save (or skip) this person's annotation of one item; answers where to go next."""
    queue, _ = _queue_for(request.user, queue_id, access.ANNOTATE)
    item = QueueItem.objects.select_related("run__task").filter(queue=queue, position=position).first()
    if item is None:
        raise Http404("no such item")
    skipped = request.POST.get("skip") == "1"
    try:
        row = ann.annotate(item.run, request.user, item.target_kind, item.target_ref,
                           label_set=None if skipped else queue.label_set,
                           labels=() if skipped else request.POST.getlist("labels"),
                           score=None if skipped else request.POST.get("score"),
                           passed=None if skipped else request.POST.get("passed"),
                           comment="" if skipped else request.POST.get("comment", ""),
                           queue_item=item, skipped=skipped)
    except ann.AnnotationRefused as exc:
        return JsonResponse({"error": str(exc)}, status=exc.http_status)
    if not skipped:
        broadcast(item.run, ann.annotation_message(row))
    total = queue.items.count()
    nxt = position + 1 if position < total else None
    return JsonResponse({"annotation": row.pk, "skipped": skipped, "progress": ann.progress(queue, request.user),
                         "next": reverse("queue_work", args=[queue.pk]) + f"?pos={nxt}" if nxt
                         else reverse("annotation_queue", args=[queue.pk])}, status=201)


async def _async_pieces(pieces: Iterator[bytes]) -> AsyncIterator[bytes]:
    """``pieces`` for an ASGI server, one piece at a time: each is made in the request's own
    thread (thread-sensitive, where its database connection is), so the export streams there too.
    (Given a plain iterator, Django's ASGI handler would first make all of it into a list.)"""
    step = sync_to_async(next, thread_sensitive=True)
    try:
        while (piece := await step(pieces, None)) is not None:
            yield piece
    finally:
        await sync_to_async(pieces.close, thread_sensitive=True)()


def export(request: HttpRequest, project_id: int) -> HttpResponse:
    """The project's annotations (or one queue's) as a dataset: ``?format=jsonl`` or ``csv``,
    streamed as it is read from the database (ann.export_stream: a chunk of annotations and their
    items at a time), so neither the time to the first byte nor the memory grows with the project."""
    project, _ = access.project_for(request.user, project_id, access.VIEW)
    fmt = request.GET.get("format", "jsonl")
    if fmt not in ("jsonl", "csv"):
        return HttpResponse("format is jsonl or csv", status=400, content_type="text/plain")
    rows = Annotation.objects.filter(run__task__project=project)
    name = f"annotations-{project.pk}"
    queue_id = request.GET.get("queue", "")
    if queue_id:
        queue = AnnotationQueue.objects.filter(project=project, pk=queue_id if queue_id.isdigit() else 0).first()
        if queue is None:
            raise Http404("no such queue in this project")
        rows, name = rows.filter(queue_item__queue=queue), f"{name}-queue-{queue.pk}"
    pieces = ann.export_stream(rows, fmt)
    ctype = "text/csv" if fmt == "csv" else "application/x-ndjson"
    response = StreamingHttpResponse(_async_pieces(pieces) if isinstance(request, ASGIRequest) else pieces,
                                     content_type=f"{ctype}; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{name}.{fmt}"'
    response["X-Accel-Buffering"] = "no"  # a proxy in front passes it on as it comes
    return response


@require_POST
def import_labels(request: HttpRequest, project_id: int) -> HttpResponse:
    """Labels from a JSONL or CSV file, matched by run + target; all rows or none. The file is read
    line by line as it is checked (never whole into memory); one over the byte cap is refused
    before any of it is read, and one over the row caps as soon as the row that crosses is read."""
    project, role = access.project_for(request.user, project_id, access.ANNOTATE)
    upload = request.FILES.get("file")
    if upload is None:
        messages.error(request, "choose a JSONL or CSV file to import")
        return redirect("annotation_queues", project_id=project.pk)
    ls_id = request.POST.get("label_set", "")
    default = LabelSet.objects.filter(project=project, pk=ls_id).first() if ls_id.isdigit() else None
    limits = ann.import_limits()
    try:
        if upload.size is None or upload.size > limits["max_bytes"]:
            raise ann.too_big(upload.name, upload.size or 0, limits["max_bytes"])
        made = ann.import_rows(project, request.user, upload.name, upload.file, default,
                               keep_authors=role >= access.REVIEW, limits=limits)
    except ann.ImportFailed as exc:
        return render(request, "annotations/annotation_import.html", {"project": project, "failure": exc, "limits": limits,
                                                               "shown": exc.problems[:SHOWN_PROBLEMS]},
                      status=exc.http_status)
    messages.success(request, f"imported {len(made)} annotation(s) from {upload.name}")
    return redirect("annotation_queues", project_id=project.pk)
