"""Pages and HTMX fragments of the studio. Views only read the database and change it
through controls/editing; the engine itself runs in Celery workers.

Every view reaches a run or mutation through ``visibility`` (a project through teams'
``access``, which it asks): someone who is not a member of the run's project gets 404 (as for a run that does not exist), a member whose role is too
low for the action gets 403, and nothing is changed in either case."""
from __future__ import annotations

import re
from pathlib import Path

from django.contrib import messages
from django.contrib.auth.decorators import login_not_required
from django.core.cache import cache
from django.core.paginator import Paginator
from django.db import transaction
from django.http import FileResponse, Http404, HttpRequest, HttpResponse, HttpResponseNotFound, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from engine.errors import TaskSpecError
from engine.protocol.events import Payload
from webapp.health import report
from webapp.tasks import registration
from webapp.tasks.models import Task
from webapp.teams import access, members
from webapp.teams.models import Membership, Project, Role, audit

from . import controls, evidence, forking, fragments, live, model_policy, search_state, training, visibility
from .bridge import broadcast, decide
from .bundles import bundle_absent, open_bundle
from .editing import EditRejected, apply_edit
from .forms import DecisionForm, NewRunForm
from .models import Event, MutationStatus, Run, WorkflowVersion
from .presenters import cytoscape_elements, graph_state, paged_payload, score_series
from .runs_table import runs_page


def _home(request: HttpRequest, form: NewRunForm, status: int = 200) -> HttpResponse:
    """Only the projects the person is a member of, each with what their role lets them do, and
    each task's newest runs, a page at a time (runs_table.py)."""
    projects = list(access.visible_projects(request.user).prefetch_related("tasks").order_by("name"))
    roles = dict(Membership.objects.filter(user=request.user).values_list("project_id", "role"))
    for project in projects:
        project.role = Role.OWNER if request.user.is_superuser else Role(roles[project.pk])
        project.can = access.abilities(project.role)
        for task in project.tasks.all():
            task.page = runs_page(task, 1)
    return render(request, "runs/home.html", {"projects": projects, "form": form}, status=status)


@require_GET
def task_runs(request: HttpRequest, task_id: int) -> HttpResponse:
    """One page of a task's runs table (the pager's target)."""
    task = get_object_or_404(Task, pk=task_id, project__in=access.visible_projects(request.user))
    return render(request, "runs/_runs_table.html", {"task": task, "page": runs_page(task, request.GET.get("page"))})


def fork(request: HttpRequest, run_id: int, number: int) -> HttpResponse:
    """GET: the fork form for version ``number`` (its workflow, ready to edit); POST: start the fork."""
    run, _ = visibility.run_for(request.user, run_id, access.REVIEW)
    version = get_object_or_404(WorkflowVersion, run=run, number=number)
    context = {"run": run, "version": version, "problems": [],
               "workflow_text": forking.editable_text(version), "iterations": forking.iterations_left(run, version)}
    if request.method != "POST":
        return render(request, "runs/_fork_form.html", context)
    context["workflow_text"] = request.POST.get("workflow", "")
    iterations = request.POST.get("iterations", "")
    context["iterations"] = iterations
    try:
        workflow = forking.parse_workflow(context["workflow_text"], model_policy.policy_for(run.task.project))
        count = int(iterations) if iterations.strip() else None
        if count is not None and not 1 <= count <= 50:
            raise forking.ForkError(["iterations must be between 1 and 50"])
        new = forking.fork_run(run, version, workflow, request.user, count)
    except ValueError as exc:  # ForkError, or iterations that are not a number
        context["problems"] = getattr(exc, "problems", None) or [f"iterations must be a whole number, not {iterations!r}"]
        return render(request, "runs/_fork_form.html", context, status=422)
    except controls.ControlError as exc:  # the disk is full, the queue is down
        context["problems"] = [str(exc)]
        return render(request, "runs/_fork_form.html", context, status=exc.http_status)
    audit(run.task.project, request.user, "fork", run=new, from_run=run.pk, from_version=number)
    url = reverse("run", args=[new.pk])
    if request.headers.get("HX-Request"):
        response = HttpResponse(status=204)
        response["HX-Redirect"] = url
        return response
    return redirect(url)


def home(request: HttpRequest) -> HttpResponse:
    # ?task=<folder>: the task just added is the one the form offers first
    initial = {"task_folder": request.GET["task"]} if request.GET.get("task") else {}
    return _home(request, NewRunForm(initial=initial, user=request.user))


@require_POST
def new_run(request: HttpRequest) -> HttpResponse:
    """A run in an existing project needs its reviewer role; a new project name creates the
    project with this person as its owner."""
    form = NewRunForm(request.POST, user=request.user)
    if not form.is_valid():
        return _home(request, form, status=400)
    name = form.cleaned_data["project"]
    existing = Project.objects.filter(name=name).first()
    if existing is not None and (access.role_of(request.user, existing) or 0) < access.REVIEW:
        # Project names are unique, so the name is taken either way; say no more than that.
        form.add_error("project", f"Starting runs in {name!r} needs its reviewer role; choose another "
                                  "project name to start your own project.")
        return _home(request, form, status=403)
    try:
        # the task's checks run its evaluate.py: outside the transaction (no write lock held meanwhile)
        spec = registration.checked_task(form.cleaned_data["task_folder"])
        with transaction.atomic():
            # raises ProjectTaken when someone else created it since the check above
            project, created = members.project_to_write(request.user, name)
            task = registration.register_task(project, spec)
            run = controls.start_run(task, request.user, **form.run_options())
            audit(project, request.user, "start", run=run, task=task.name, search=run.search,
                  new_project=created)
    except TaskSpecError as exc:
        form.add_error("task_folder", str(exc))
        return _home(request, form, status=400)
    except members.ProjectTaken:
        form.add_error("project", f"{name!r} was just created by someone else; choose another name.")
        return _home(request, form, status=403)
    except controls.QueueUnavailable as exc:  # Redis down: say so; the run is kept, resumable
        form.add_error(None, str(exc))
        return _home(request, form, status=503)
    except controls.DiskFull as exc:  # nothing was created
        form.add_error(None, str(exc))
        return _home(request, form, status=507)
    return redirect("run", run_id=run.pk)


def run_page(request: HttpRequest, run_id: int) -> HttpResponse:
    run, role = visibility.run_for(request.user, run_id)
    # The latest events as the live messages they were, for run.js to list like the ones to come.
    recent = [live.stored_message(e) for e in reversed(run.events.order_by("-seq")[:14])]
    return render(request, "runs/run.html", {"recent": recent, **fragments.run_context(run, role),
                                             "person_kinds": evidence.PERSON_KINDS, "max_note_chars": evidence.MAX_NOTE_CHARS})


def run_header(request: HttpRequest, run_id: int) -> HttpResponse:
    run, role = visibility.run_for(request.user, run_id)
    return HttpResponse(fragments.header(run, role))


@require_POST
def run_control(request: HttpRequest, run_id: int, action: str) -> HttpResponse:
    run, role = visibility.run_for(request.user, run_id, access.REVIEW)
    action_fn = {"pause": controls.pause_run, "resume": controls.resume_run, "cancel": controls.cancel_run}.get(action)
    if action_fn is None:
        raise Http404(action)
    error, status = None, 200
    try:
        action_fn(run)
    except controls.ControlError as exc:
        error, status = str(exc), exc.http_status  # 409 for the run's state, 503 for a queue that is down
    if error is None or status == 503:  # a 503 resume still queued the run's intent: it is kept, interrupted
        audit(run.task.project, request.user, "control", run=run, control=action, refused=error or "")
    run.refresh_from_db()
    return HttpResponse(fragments.header(run, role, error=error), status=status)


def graph_json(request: HttpRequest, run_id: int) -> JsonResponse:
    run, _ = visibility.run_for(request.user, run_id)
    state = graph_state(run)
    elements = cytoscape_elements(state["workflow"], state["states"]) if state["workflow"] else []
    return JsonResponse({**{k: v for k, v in state.items() if k != "workflow"}, "elements": elements,
                         "status": run.status, "worker_lost": run.worker_lost})


def scores_json(request: HttpRequest, run_id: int) -> JsonResponse:
    run, _ = visibility.run_for(request.user, run_id)
    return JsonResponse({**score_series(run), "usage": run.usage, "max_tokens": run.max_tokens,
                         "higher_is_better": run.task.higher_is_better, "metric": run.task.metric_name})


def tree_json(request: HttpRequest, run_id: int) -> JsonResponse:
    run, _ = visibility.run_for(request.user, run_id)
    state = search_state.search_state(run)
    if state is None:
        raise Http404("this run's search draws no tree")
    return JsonResponse(state)


def training_json(request: HttpRequest, run_id: int) -> JsonResponse:
    """The Training panel's job list: each job's status, device, progress, ETA, best validation
    and curve (webapp/runs/training.py); training_* messages keep it live."""
    run, role = visibility.run_for(request.user, run_id)
    return JsonResponse({**training.jobs_state(run), "can_control": access.abilities(role)["review"]})


@require_POST
def training_control(request: HttpRequest, run_id: int, job: str, action: str) -> JsonResponse:
    """Pause, cancel or resume one training job: reviewers and owners, audited; refused through
    a share link (403) like every other write."""
    run, _ = visibility.run_for(request.user, run_id, access.REVIEW)
    try:
        said = training.control_job(run, job, action)
    except training.TrainingRefused as exc:
        return JsonResponse({"error": str(exc)}, status=exc.http_status)
    audit(run.task.project, request.user, "control", run=run, control=f"training {action}", job=job)
    return JsonResponse({"ok": True, "message": said, **training.jobs_state(run)})


def evidence_json(request: HttpRequest, run_id: int) -> JsonResponse:
    """The evidence panel's first state: every record (a preview of its text), link, branch
    verdict and what each role was given (webapp/runs/evidence.py); live messages extend it."""
    run, role = visibility.run_for(request.user, run_id)
    return JsonResponse(evidence.evidence_state(run, can_write=access.abilities(role)["annotate"]))


def evidence_record(request: HttpRequest, run_id: int, record_id: int) -> JsonResponse:
    run, _ = visibility.run_for(request.user, run_id)
    detail = evidence.record_detail(run, record_id)
    if detail is None:
        raise Http404(f"no record {record_id} in run {run_id}'s evidence graph")
    return JsonResponse(detail)


@require_POST
def evidence_add(request: HttpRequest, run_id: int) -> JsonResponse:
    """A person's note, hypothesis, question or finding in the run's graph, on its trunk: agents
    whose memory policy retrieves or subscribes to the kind see it at their next step. Annotators,
    reviewers and owners may write; a viewer gets 403. Bad input (400) writes nothing."""
    run, _ = visibility.run_for(request.user, run_id, access.ANNOTATE)
    try:
        links = evidence.parse_links(request.POST.getlist("link"))
        record = evidence.add_person(run, request.user.get_username(), request.POST.get("kind", ""),
                                     request.POST.get("text", ""), links)
    except evidence.RecordRefused as exc:
        return JsonResponse({"error": str(exc)}, status=exc.http_status)
    audit(run.task.project, request.user, "note", run=run, kind=request.POST.get("kind", ""), record=record.get("id"))
    message = evidence.person_message(run, record, links)
    broadcast(run, dict(message))  # every viewer's panel, this one's included, adds it live
    return JsonResponse(message["data"], status=201)


def mutation_queue(request: HttpRequest, run_id: int) -> HttpResponse:
    run, role = visibility.run_for(request.user, run_id)
    return HttpResponse(fragments.queue(run, role))


DECISIONS = {"approve": MutationStatus.APPROVED, "promote": MutationStatus.PROMOTED, "veto": MutationStatus.VETOED}


@require_POST
def mutation_decide(request: HttpRequest, mutation_id: int, action: str) -> HttpResponse:
    row, role = visibility.mutation_for(request.user, mutation_id, access.REVIEW)
    status = DECISIONS.get(action)
    if status is None or (status == MutationStatus.PROMOTED and not row.gate.can_promote):
        raise Http404(action)
    decision = DecisionForm(request.POST)
    if not decision.is_valid():
        return HttpResponse(decision.errors.as_ul(), status=400)
    reason = decision.cleaned_data["reason"] or {"approve": "approved in the studio", "promote": "promoted in the studio",
                                                 "veto": "vetoed"}[action]
    if decide(row, status, f"user:{request.user.get_username()}", reason):
        audit(row.run.task.project, request.user, "decision", run=row.run, mutation=row.pk, decision=status,
              reason=reason)
        try:
            controls.after_decision(row.run)  # a run suspended on this proposal goes back to the queue
        except controls.QueueUnavailable as exc:  # the decision stands; the run waits, interrupted
            messages.error(request, str(exc))
    else:
        messages.warning(request, f"mutation {row.pk} was already {row.get_status_display()}")
    row.refresh_from_db()
    return HttpResponse(fragments.mutation(row, role))


def search_panels(request: HttpRequest, run_id: int) -> HttpResponse:
    run, _ = visibility.run_for(request.user, run_id)
    return HttpResponse(fragments.search(run))


def timeline(request: HttpRequest, run_id: int) -> HttpResponse:
    run, _ = visibility.run_for(request.user, run_id)
    return HttpResponse(fragments.timeline(run))


def version_diff(request: HttpRequest, run_id: int) -> HttpResponse:
    run, _ = visibility.run_for(request.user, run_id)
    try:
        a, b = (int(request.GET[k]) if request.GET.get(k) else None for k in ("a", "b"))
        context = fragments.diff_context(run, a, b)
    except (KeyError, ValueError):
        return HttpResponse('<p class="error">Choose two versions of this run.</p>', status=400)
    if context is None:
        return HttpResponse('<p class="muted">No versions yet.</p>')
    return render(request, "runs/_diff.html", context)


def editor(request: HttpRequest, run_id: int) -> HttpResponse:
    # Anyone who sees the run may read the editor; saving an edit needs the reviewer role.
    run, role = visibility.run_for(request.user, run_id, access.REVIEW if request.method == "POST" else access.VIEW)
    saved, errors = None, []
    if request.method == "POST":
        try:
            saved = apply_edit(run, request.POST.get("kind", ""), request.POST.dict(), request.user.get_username())
            audit(run.task.project, request.user, "edit", run=run, kind=request.POST.get("kind", ""),
                  version=saved.number, note=saved.note)
        except EditRejected as exc:
            errors = exc.problems
    context = {**fragments.editor_context(run, role, saved), "saved": saved, "errors": errors,
               "kind": request.POST.get("kind", "contract")}
    return render(request, "runs/_editor.html", context, status=422 if errors else 200)


def _run_key(run: Run) -> str:
    # the run's number, when it was made (a reset database numbers runs from 1 again) and how many
    # events it has had: a key no other run, and no later state of this one, shares
    return f"{run.pk}:{run.created.timestamp() if run.created else 0}:{run.last_seq}"


def trace_options(run: Run) -> dict:
    """The trace filters' choices (the run's agents, kinds, iterations): three scans of a run's
    events, kept until the run has another event (its ``last_seq`` is in the key)."""
    key = f"trellis:trace-options:{_run_key(run)}"
    options = cache.get(key)
    if options is None:
        options = {"agents": list(run.events.exclude(agent="").values_list("agent", flat=True).distinct().order_by("agent")),
                   "kinds": list(run.events.values_list("kind", flat=True).distinct().order_by("kind")),
                   "iterations": list(run.events.values_list("iteration", flat=True).distinct().order_by("iteration"))}
        cache.set(key, options, 3600)
    return options


class CountedOnce:
    """A trace query whose row count is counted once per filter and number of events (the
    paginator asks for it on every page)."""

    def __init__(self, qs, run: Run, filters: dict):
        self.qs = qs
        self.key = f"trellis:trace-count:{_run_key(run)}:" + "|".join(f"{k}={v}" for k, v in sorted(filters.items()))

    def count(self) -> int:
        n = cache.get(self.key)
        if n is None:
            n = self.qs.count()
            cache.set(self.key, n, 3600)
        return n

    def __getitem__(self, item):
        return self.qs[item]

    def __len__(self) -> int:
        return self.count()


def trace(request: HttpRequest, run_id: int) -> HttpResponse:
    run, _ = visibility.run_for(request.user, run_id)
    qs = run.events.all()
    filters = {k: request.GET.get(k, "") for k in ("agent", "kind", "iteration")}
    if filters["agent"]:
        qs = qs.filter(agent=filters["agent"])
    if filters["kind"]:
        qs = qs.filter(kind=filters["kind"])
    if re.fullmatch(r"-?[0-9]{1,9}", filters["iteration"]):  # ASCII digits only: int("²") raised a 500
        qs = qs.filter(iteration=int(filters["iteration"]))
    page = Paginator(CountedOnce(qs, run, filters), 50).get_page(request.GET.get("page"))
    context = {"run": run, "page": page, "filters": filters, **trace_options(run)}
    template = "runs/_trace_rows.html" if request.headers.get("HX-Request") else "runs/trace.html"
    return render(request, template, context)


def event_detail(request: HttpRequest, run_id: int, seq: int) -> HttpResponse:
    run, _ = visibility.run_for(request.user, run_id)
    event = get_object_or_404(Event, run=run, seq=seq)
    field = request.GET.get("field")
    try:
        body = paged_payload(event, field, int(request.GET.get("page", 1)))
    except (KeyError, IndexError, ValueError):
        raise Http404(f"no field {field!r} in event {seq}")
    template = "runs/_event_field.html" if field else "runs/_event_detail.html"
    data = event.typed  # None for a row from before payloads were typed: no links
    return render(request, template, {"event": event, "body": body, "run_id": run_id,
                                      "artifacts": event_artifacts(data)})


def event_artifacts(data: Payload | None) -> list[tuple[str, str]]:
    """(name, sha256) of every stored file an event names: an execution's files, a predictions
    or program hash; each can be opened and annotated."""
    if data is None:
        return []
    found: dict[str, str] = {}
    files = getattr(data, "files", None)
    if isinstance(files, dict):
        found.update({sha: str(name) for name, sha in files.items() if isinstance(sha, str)})
    for key in type(data).model_fields:
        value = getattr(data, key)
        if key.endswith("sha256") and isinstance(value, str):
            found.setdefault(value, key.removesuffix("_sha256") or "artifact")
    return [(name, sha) for sha, name in found.items() if re.fullmatch(r"[0-9a-f]{64}", sha)]


@require_GET
def artifact(request: HttpRequest, run_id: int, sha: str) -> HttpResponse:
    """An artifact a probe stored (predictions, code), found by its hash in the run's folder."""
    run, _ = visibility.run_for(request.user, run_id)
    if len(sha) != 64 or not all(c in "0123456789abcdef" for c in sha):
        raise Http404("not an artifact hash")
    root = Path(run.run_dir)
    for path in root.glob(f"**/artifacts/{sha[:2]}/{sha}"):
        data = path.read_bytes()
        return HttpResponse(data[:1_000_000], content_type="text/plain; charset=utf-8")
    raise Http404("artifact not found in this run")


@require_GET
def champion_bundle(request: HttpRequest, run_id: int) -> HttpResponse:
    """The champion bundle of a tree run (engine/bundle/): champion.zip, streamed as a download.
    Whoever may view the run may download it, through a share link too; a run without one gets
    404 saying why."""
    run, _ = visibility.run_for(request.user, run_id)
    handle = open_bundle(run)
    if handle is None:
        return HttpResponseNotFound(f"Run {run.pk} has no champion bundle: {bundle_absent(run)}.\n",
                                    content_type="text/plain; charset=utf-8")
    name = re.sub(r"[^A-Za-z0-9._-]", "_", f"run-{run.pk}-{run.task.name}-champion.zip")
    return FileResponse(handle, as_attachment=True, filename=name, content_type="application/zip")


@login_not_required
def healthz(request: HttpRequest) -> JsonResponse:
    """Database, Redis and worker health for people and supervisors; 503 when a part is down."""
    state = report()
    if not _may_see_health_details(request):
        # a stranger learns whether the studio is well, not how many workers it has nor its free disk
        state = {k: v for k, v in state.items() if k not in HEALTH_DETAILS}
    return JsonResponse(state, status=200 if state["ok"] else 503)


HEALTH_DETAILS = ("workers", "training_slots", "disk_free_mb")


def _may_see_health_details(request: HttpRequest) -> bool:
    """Staff, or a process on this machine talking directly (the studio's supervisor, an operator's
    probe): a proxy in front adds X-Forwarded-For, so a remote caller through it is not taken for one."""
    if request.user.is_authenticated and request.user.is_staff:
        return True
    direct = "HTTP_X_FORWARDED_FOR" not in request.META and "HTTP_FORWARDED" not in request.META
    return direct and request.META.get("REMOTE_ADDR") in ("127.0.0.1", "::1")
