"""Adding a task: a zip uploaded or a server folder registered (webapp/tasks/upload.py), checked
by the engine's loader and preflight; a task without evaluate.py waits for a person to approve
the drafted one. Adding a task to a project needs its reviewer role; a new name makes a project."""
from __future__ import annotations

from pathlib import Path
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from engine import evaluator_draft
from engine.errors import TaskSpecError
from engine.preflight import PreflightError
from webapp.teams import members
from webapp.teams.models import audit

from . import registration, upload
from .forms import AddTaskForm
from .upload import TaskRejected


def add_task(request: HttpRequest) -> HttpResponse:
    """A task folder a person brings: a zip uploaded or a server folder registered, validated by
    the engine's task loader and preflight; every problem is listed on the page and nothing is
    kept when there is one."""
    form = AddTaskForm(request.POST or None, request.FILES or None)
    problems: list[str] = []
    warnings: list[str] = []
    if request.method == "POST" and form.is_valid():
        name, folder = form.cleaned_data["project"], None
        try:
            archive = form.cleaned_data.get("archive")
            if archive is not None:
                if archive.size > settings.TRELLIS_TASK_UPLOAD_MAX_BYTES:
                    raise TaskRejected([f"{archive.name} is {archive.size:,} bytes; the studio takes at most "
                                        f"{settings.TRELLIS_TASK_UPLOAD_MAX_BYTES:,}"])
                folder = upload.unpack_zip(archive, archive.name)
            else:
                folder = upload.registered_path(form.cleaned_data["path"])
            if not (folder / "evaluate.py").exists():
                # the Evaluator drafts it from Evaluation.md; a person reads and approves it first
                members.project_to_write(request.user, name)
                draft = evaluator_draft.draft_for(folder)
                return render(request, "tasks/approve_evaluator.html", {
                    "draft": draft, "folder": str(folder), "project": name, "sha": draft.sha256,
                    "upload": archive is not None})
            spec = registration.checked_task(folder)  # runs evaluate.py: never inside the transaction
            with transaction.atomic():
                project, created = members.project_to_write(request.user, name)
                task = registration.register_task(project, spec)
                audit(project, request.user, "task", task=task.name, folder=str(folder),
                      source="upload" if archive is not None else "path", new_project=created)
            return redirect(f"{reverse('home')}?{urlencode({'task': task.folder})}")
        except TaskRejected as exc:
            problems = exc.problems
        except PreflightError as exc:
            problems, warnings = exc.problems, exc.warnings
        except TaskSpecError as exc:
            problems = [str(exc)]
        except members.ProjectTaken:
            form.add_error("project", f"Adding tasks to {name!r} needs its reviewer role; choose another name "
                                      "to start your own project.")
        if folder is not None and form.cleaned_data.get("archive") is not None:
            upload.discard(folder)
    status = 422 if problems or form.errors else 200
    return render(request, "tasks/add_task.html", {"form": form, "problems": problems, "warnings": warnings,
                                                  "roots": upload.allowed_roots()}, status=status)


def _waiting_folder(text: str) -> Path:
    """A folder whose drafted evaluate.py waits for approval: an upload, or under TRELLIS_TASK_ROOTS."""
    try:
        folder = Path(text).resolve(strict=True)
    except (OSError, RuntimeError):
        raise Http404("no such task folder") from None
    uploads = upload.uploads_dir().resolve()
    inside = [uploads, *upload.allowed_roots()]
    if not any(root in folder.parents for root in inside) or not (folder / evaluator_draft.DRAFT).is_file():
        raise Http404("no drafted evaluate.py waits there")
    return folder


@require_POST
def approve_evaluator(request: HttpRequest) -> HttpResponse:
    """A person's decision on a drafted evaluate.py: approved by the hash they were shown, it is
    saved beside the task and the task is added; rejected, an uploaded folder is discarded."""
    folder = _waiting_folder(request.POST.get("folder", ""))
    name = request.POST.get("project", "").strip()
    uploaded = upload.uploads_dir().resolve() in folder.parents
    if request.POST.get("decision") != "approve":
        if uploaded:
            upload.discard(folder)
        else:
            (folder / evaluator_draft.DRAFT).unlink(missing_ok=True)
        messages.info(request, "The drafted evaluate.py was rejected; nothing was added.")
        return redirect("add_task")
    problems: list[str] = []
    warnings: list[str] = []
    try:
        project, created = members.project_to_write(request.user, name)
        evaluator_draft.approve(folder, request.POST.get("sha", ""), request.user.get_username())
        spec = registration.checked_task(folder)
        with transaction.atomic():
            task = registration.register_task(project, spec)
            audit(project, request.user, "evaluator_approved", task=task.name, folder=str(folder),
                  sha256=request.POST.get("sha", "")[:64], new_project=created)
        return redirect(f"{reverse('home')}?{urlencode({'task': task.folder})}")
    except PreflightError as exc:
        problems, warnings = exc.problems, exc.warnings
    except TaskSpecError as exc:
        problems = [str(exc)]
    except members.ProjectTaken:
        problems = [f"Adding tasks to {name!r} needs its reviewer role."]
    return render(request, "tasks/add_task.html", {"form": AddTaskForm(), "problems": problems, "warnings": warnings,
                                                  "roots": upload.allowed_roots()}, status=422)
