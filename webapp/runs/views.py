"""Pages and HTMX fragments of the studio. Views only read the database and change it
through controls/editing; the engine itself runs in Celery workers."""
from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_not_required
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from engine.errors import TaskSpecError

from . import controls
from .bridge import decide
from .editing import EditRejected, apply_edit
from .forms import NewRunForm
from .models import Event, Mutation, MutationStatus, Project, Run
from .presenters import cytoscape_elements, graph_state, paged_payload, score_series, side_by_side


def home(request: HttpRequest) -> HttpResponse:
    projects = Project.objects.prefetch_related("tasks__runs").order_by("name")
    return render(request, "runs/home.html", {"projects": projects, "form": NewRunForm()})


@require_POST
def new_run(request: HttpRequest) -> HttpResponse:
    form = NewRunForm(request.POST)
    if not form.is_valid():
        projects = Project.objects.prefetch_related("tasks__runs").order_by("name")
        return render(request, "runs/home.html", {"projects": projects, "form": form}, status=400)
    project, _ = Project.objects.get_or_create(name=form.cleaned_data["project"])
    try:
        task = controls.task_for_folder(project, form.cleaned_data["task_folder"])
    except TaskSpecError as exc:
        form.add_error("task_folder", str(exc))
        projects = Project.objects.prefetch_related("tasks__runs").order_by("name")
        return render(request, "runs/home.html", {"projects": projects, "form": form}, status=400)
    run = controls.start_run(task, request.user, **form.run_options())
    return redirect("run", run_id=run.pk)


def run_page(request: HttpRequest, run_id: int) -> HttpResponse:
    run = get_object_or_404(Run.objects.select_related("task__project"), pk=run_id)
    recent = run.events.order_by("-seq").only("kind", "agent", "iteration", "payload")[:14]
    return render(request, "runs/run.html", {"run": run, "recent": recent, **_run_context(run)})


def _run_context(run: Run) -> dict:
    versions = list(run.versions.all())
    by_hash = {v.hash: v.number for v in versions}
    official = [{"label": label, "version": by_hash.get(d.get("workflow_hash")), **d}
                for label, d in (run.result or {}).items() if label in ("initial", "final")]
    return {"versions": versions, "official": official,
            "pending": run.mutations.filter(status=MutationStatus.PROPOSED).count()}


def run_header(request: HttpRequest, run_id: int) -> HttpResponse:
    run = get_object_or_404(Run.objects.select_related("task__project"), pk=run_id)
    return render(request, "runs/_header.html", {"run": run, **_run_context(run)})


@require_POST
def run_control(request: HttpRequest, run_id: int, action: str) -> HttpResponse:
    run = get_object_or_404(Run, pk=run_id)
    action_fn = {"pause": controls.pause_run, "resume": controls.resume_run, "cancel": controls.cancel_run}.get(action)
    if action_fn is None:
        raise Http404(action)
    error = None
    try:
        action_fn(run)
    except controls.ControlError as exc:
        error = str(exc)
    run.refresh_from_db()
    response = render(request, "runs/_header.html", {"run": run, "error": error, **_run_context(run)},
                      status=409 if error else 200)
    return response


def graph_json(request: HttpRequest, run_id: int) -> JsonResponse:
    run = get_object_or_404(Run, pk=run_id)
    state = graph_state(run)
    elements = cytoscape_elements(state["workflow"], state["states"]) if state["workflow"] else []
    return JsonResponse({**{k: v for k, v in state.items() if k != "workflow"}, "elements": elements,
                         "status": run.status, "worker_lost": run.worker_lost})


def scores_json(request: HttpRequest, run_id: int) -> JsonResponse:
    run = get_object_or_404(Run, pk=run_id)
    return JsonResponse({**score_series(run), "usage": run.usage, "max_tokens": run.max_tokens,
                         "higher_is_better": run.task.higher_is_better, "metric": run.task.metric_name})


def mutation_queue(request: HttpRequest, run_id: int) -> HttpResponse:
    run = get_object_or_404(Run, pk=run_id)
    mutations = list(run.mutations.all()[:50])
    return render(request, "runs/_queue.html", {"run": run, "mutations": mutations})


@require_POST
def mutation_decide(request: HttpRequest, mutation_id: int, action: str) -> HttpResponse:
    row = get_object_or_404(Mutation.objects.select_related("run"), pk=mutation_id)
    if action not in ("approve", "veto"):
        raise Http404(action)
    status = MutationStatus.APPROVED if action == "approve" else MutationStatus.VETOED
    reason = request.POST.get("reason", "").strip() or ("approved in the studio" if action == "approve" else "vetoed")
    if not decide(row, status, f"user:{request.user.get_username()}", reason):
        messages.warning(request, f"mutation {row.pk} was already {row.get_status_display()}")
    row.refresh_from_db()
    return render(request, "runs/_mutation.html", {"m": row, "run": row.run})


def timeline(request: HttpRequest, run_id: int) -> HttpResponse:
    run = get_object_or_404(Run, pk=run_id)
    return render(request, "runs/_timeline.html", {"run": run, "versions": list(run.versions.all())})


def version_diff(request: HttpRequest, run_id: int) -> HttpResponse:
    run = get_object_or_404(Run, pk=run_id)
    versions = {v.number: v for v in run.versions.all()}
    if not versions:
        return HttpResponse('<p class="muted">No versions yet.</p>')
    latest = max(versions)
    try:
        a = versions[int(request.GET.get("a", max(1, latest - 1)))]
        b = versions[int(request.GET.get("b", latest))]
    except (KeyError, ValueError):
        return HttpResponse('<p class="error">Choose two versions of this run.</p>', status=400)
    return render(request, "runs/_diff.html", {"run": run, "a": a, "b": b, "rows": side_by_side(a.data, b.data),
                                               "versions": sorted(versions.values(), key=lambda v: v.number)})


def editor(request: HttpRequest, run_id: int) -> HttpResponse:
    run = get_object_or_404(Run, pk=run_id)
    version = run.current_version
    context = {"run": run, "version": version, "errors": [], "saved": None, "kind": request.POST.get("kind", "contract")}
    if request.method == "POST":
        try:
            context["saved"] = apply_edit(run, request.POST.get("kind", ""), request.POST.dict(),
                                          request.user.get_username())
            context["version"] = context["saved"]
        except EditRejected as exc:
            context["errors"] = exc.problems
    if context["version"]:
        data = context["version"].data
        context["edges"] = [f"{e['source']}->{e['target']}:{e['artifact']}" for e in data.get("edges", [])]
        context["edge_list"] = data.get("edges", [])
        context["agents"] = data.get("agents", [])
        context["procedures"] = sorted((data.get("harness", {}).get("procedures") or {}).items())
    return render(request, "runs/_editor.html", context, status=422 if context["errors"] else 200)


def trace(request: HttpRequest, run_id: int) -> HttpResponse:
    run = get_object_or_404(Run, pk=run_id)
    qs = run.events.all()
    filters = {k: request.GET.get(k, "") for k in ("agent", "kind", "iteration")}
    if filters["agent"]:
        qs = qs.filter(agent=filters["agent"])
    if filters["kind"]:
        qs = qs.filter(kind=filters["kind"])
    if filters["iteration"].lstrip("-").isdigit():
        qs = qs.filter(iteration=int(filters["iteration"]))
    page = Paginator(qs, 50).get_page(request.GET.get("page"))
    context = {"run": run, "page": page, "filters": filters,
               "agents": run.events.exclude(agent="").values_list("agent", flat=True).distinct().order_by("agent"),
               "kinds": run.events.values_list("kind", flat=True).distinct().order_by("kind"),
               "iterations": run.events.values_list("iteration", flat=True).distinct().order_by("iteration")}
    template = "runs/_trace_rows.html" if request.headers.get("HX-Request") else "runs/trace.html"
    return render(request, template, context)


def event_detail(request: HttpRequest, run_id: int, seq: int) -> HttpResponse:
    event = get_object_or_404(Event, run_id=run_id, seq=seq)
    field = request.GET.get("field")
    try:
        body = paged_payload(event, field, int(request.GET.get("page", 1)))
    except (KeyError, IndexError, ValueError):
        raise Http404(f"no field {field!r} in event {seq}")
    template = "runs/_event_field.html" if field else "runs/_event_detail.html"
    return render(request, template, {"event": event, "body": body, "run_id": run_id})


@require_GET
def artifact(request: HttpRequest, run_id: int, sha: str) -> HttpResponse:
    """An artifact a probe stored (predictions, code), found by its hash in the run's folder."""
    run = get_object_or_404(Run, pk=run_id)
    if len(sha) != 64 or not all(c in "0123456789abcdef" for c in sha):
        raise Http404("not an artifact hash")
    root = Path(run.run_dir)
    for path in root.glob(f"**/artifacts/{sha[:2]}/{sha}"):
        data = path.read_bytes()
        return HttpResponse(data[:1_000_000], content_type="text/plain; charset=utf-8")
    raise Http404("artifact not found in this run")


@login_not_required
def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"ok": True, "examples": str(settings.TRELLIS_EXAMPLES_DIR)})
