"""The library in the studio (AgentCo-op's S): every skill, reference, tool and external agent
synthesis can draw on, browsable by kind and words, each with its typed interface and where it
comes from; a skill or reference written or edited here is checked as the engine reads it and,
only then, saved to the library folder (the engine's truth) with a LibraryEdit row (who, when,
every version's text). Tools come from MCP servers and external agents from their folders: those
are shown, not edited here."""
from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from engine.library.artifact import KINDS, NAME, LibraryError, parse_artifact
from webapp.teams import access
from webapp.teams.models import AuditEntry, Project

from .models import LibraryEdit
from .project import library_for

EDITABLE = ("skill", "resource")
TEMPLATE = """# A short title saying what the skill does

kind: skill
roles: planner
inputs: report: markdown
outputs: plan: markdown
applies to: table
tags: a few, words, retrieval matches

## Procedure
What the agent does, step by step. This text is added to the agent's prompt.

## When to use
What in a task calls for it.
"""


def may_edit(user, project: Project | None = None) -> bool:
    """The shared library: staff alone (every project's runs read it, and anyone becomes a project's
    owner by uploading a task, so a project role must not reach what other projects' agents read).
    A project's own library: its reviewers, whose edits reach that project's runs only."""
    if not user.is_active:
        return False
    if project is None:
        return bool(user.is_staff)
    return user.is_staff or (access.role_of(user, project) or 0) >= access.REVIEW


def _scope(request: HttpRequest) -> Project | None:
    """The project whose library is shown (``?project=<id>``, one the person can see), or None: shared."""
    pk = request.GET.get("project") or ""
    if not pk:
        return None
    if not pk.isdigit():
        raise Http404("no such project")
    return get_object_or_404(Project, pk=int(pk), pk__in=access.visible_projects(request.user).values("pk"))


def _audit(edit: LibraryEdit, user, project: Project | None) -> None:
    """The edit in the audit log of every project whose runs read it: all of them for the shared
    library, the one project for its own."""
    detail = {"kind": edit.kind, "name": edit.name, "version": edit.version[:12], "note": edit.note,
              "library": project.name if project else "shared"}
    projects = [project] if project is not None else Project.objects.all()
    AuditEntry.objects.bulk_create([AuditEntry(project=p, actor=f"user:{user.get_username()}", action="library",
                                               detail=detail) for p in projects], batch_size=500)


def _matches(artifact, words: str) -> bool:
    text = " ".join([artifact.name, artifact.title, artifact.when, " ".join(artifact.tags), " ".join(artifact.roles),
                     " ".join(artifact.applies_to)]).lower()
    return all(w in text for w in words.lower().split())


@login_required
def library_page(request: HttpRequest) -> HttpResponse:
    project = _scope(request)
    library = library_for(project)
    kind, words = request.GET.get("kind", ""), request.GET.get("q", "").strip()[:200]
    shown = [a for a in library.artifacts.values() if (not kind or a.kind == kind) and _matches(a, words)]
    shown.sort(key=lambda a: (KINDS.index(a.kind) if a.kind in KINDS else 9, a.name))
    counts = {k: sum(1 for a in library.artifacts.values() if a.kind == k) for k in KINDS}
    return render(request, "library/library.html", {
        "artifacts": shown, "counts": counts, "kind": kind, "q": words, "problems": library.problems,
        "can_edit": may_edit(request.user, project), "folder": library.folder, "project": project,
        "projects": access.visible_projects(request.user).order_by("name")[:100],
        "edits": LibraryEdit.objects.filter(project=project).select_related("author")[:10]})


@login_required
@require_http_methods(["GET", "POST"])
def library_artifact(request: HttpRequest, kind: str, name: str) -> HttpResponse:
    if kind not in KINDS or len(name) > 200:
        raise Http404("no such library artifact")
    project = _scope(request)
    library = library_for(project)
    new = name == "new"
    artifact = None if new else library.artifacts.get(f"{kind}:{name}")
    if artifact is None and not new:
        raise Http404(f"no {kind} {name!r} in the library")
    editable = kind in EDITABLE and may_edit(request.user, project)
    error, text, save_as = None, (artifact.to_markdown() if artifact else TEMPLATE.replace("kind: skill", f"kind: {kind}")), \
        (artifact.name if artifact else "")
    status = 200
    if request.method == "POST":
        if not editable:
            raise PermissionDenied("only staff edit the shared library" if project is None else
                                   f"editing {project.name}'s own library needs its reviewer role")
        text = request.POST.get("text", "").replace("\r\n", "\n")
        save_as = request.POST.get("name", "").strip() if new else name
        try:
            if not NAME.fullmatch(save_as):
                raise LibraryError(f"the name {save_as!r} must be lower-case letters, digits and hyphens")
            if parse_artifact(text, save_as).kind != kind:
                raise LibraryError(f"this page edits a {kind}; the text says `kind: {parse_artifact(text, save_as).kind}`")
            saved = library.save(save_as, text)
            with transaction.atomic():
                edit = LibraryEdit.objects.create(name=saved.name, kind=saved.kind, text=text, version=saved.version,
                                                  author=request.user, note=request.POST.get("note", "")[:500],
                                                  project=project)
                _audit(edit, request.user, project)
            whose = f"{project.name}'s new runs use it" if project else "every project's new runs use it"
            messages.success(request, f"{saved.kind} {saved.name!r} saved ({saved.version[:12]}); {whose}")
            url = reverse("library_artifact", kwargs={"kind": saved.kind, "name": saved.name})
            return redirect(f"{url}?project={project.pk}" if project else url)
        except LibraryError as exc:
            error, status = str(exc), 400
    history = LibraryEdit.objects.filter(kind=kind, name=name, project=project).select_related("author")[:20] \
        if not new else []
    return render(request, "library/library_artifact.html", {
        "artifact": artifact, "kind": kind, "new": new, "editable": editable, "error": error, "text": text,
        "name": save_as, "history": history, "project": project}, status=status)
