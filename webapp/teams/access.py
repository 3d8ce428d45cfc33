"""Who may do what in a project. Every view, fragment and the WebSocket consumer asks here
(a run's viewers through webapp/runs/visibility.py, which asks here for the run's project).

A person sees a project (its tasks, runs, traces, artifacts) only as one of its members; what
they may change depends on their role (viewer < annotator < reviewer < owner, see ``Role``).
Superusers count as owners of every project: they administer the install anyway.

Refusals are of two kinds, used consistently: a run or project the person cannot see answers
404, exactly like one that does not exist, so ids reveal nothing to outsiders; a member whose
role is too low for an action gets 403 (PermissionDenied)."""
from __future__ import annotations

from typing import Iterable

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404

from .models import Membership, Project, Role

# What each action needs; the views and templates name these rather than bare roles.
VIEW = Role.VIEWER
ANNOTATE = Role.ANNOTATOR
REVIEW = Role.REVIEWER      # decide mutations, edit the workflow, pause/resume/cancel, start runs
MANAGE = Role.OWNER         # add, change and remove members


def role_of(user, project: Project | int) -> Role | None:
    """The user's role in the project, or None when they are not a member."""
    if user is None or not user.is_authenticated or not user.is_active:
        return None
    if user.is_superuser:
        return Role.OWNER
    project_id = project.pk if isinstance(project, Project) else project
    role = Membership.objects.filter(project_id=project_id, user=user).values_list("role", flat=True).first()
    return Role(role) if role is not None else None


def roles_of(user_ids: Iterable[int], project: Project | int) -> dict[int, Role]:
    """``role_of`` for many people at once (a web process's sockets on one run): each active
    member's role; those who are not (or no longer) members are left out."""
    project_id = project.pk if isinstance(project, Project) else project
    people = list(get_user_model().objects.filter(pk__in=set(user_ids), is_active=True).values_list("pk", "is_superuser"))
    roles = {pk: Role.OWNER for pk, superuser in people if superuser}
    members = Membership.objects.filter(project_id=project_id, user_id__in=[pk for pk, _ in people if pk not in roles])
    roles.update((user_id, Role(role)) for user_id, role in members.values_list("user_id", "role"))
    return roles


def require(user, project: Project | int, min_role: Role) -> Role:
    """The user's role, if it is at least ``min_role``; otherwise PermissionDenied (403)."""
    role = role_of(user, project)
    if role is None or role < min_role:
        raise PermissionDenied(f"this needs the {Role(min_role).label} role in the project")
    return role


def visible_projects(user) -> QuerySet[Project]:
    if user is None or not user.is_authenticated or not user.is_active:
        return Project.objects.none()
    if user.is_superuser:
        return Project.objects.all()
    return Project.objects.filter(memberships__user=user)


def admit(user, project: Project | None, min_role: Role, what: str) -> Role:
    """404 for whoever cannot see the project (as if it did not exist), 403 below ``min_role``."""
    role = role_of(user, project) if project is not None else None
    if role is None:
        raise Http404(f"no such {what}")
    if role < min_role:
        raise PermissionDenied(f"this needs the {Role(min_role).label} role in {project.name}")
    return role


def project_for(user, project_id: int, min_role: Role) -> tuple[Project, Role]:
    project = Project.objects.filter(pk=project_id).first()
    return project, admit(user, project, min_role, "project")


def abilities(role: Role | None) -> dict[str, bool]:
    """What templates show: controls a role cannot use are hidden (the views still check)."""
    rank = role or 0
    return {"view": rank >= VIEW, "annotate": rank >= ANNOTATE, "review": rank >= REVIEW, "manage": rank >= MANAGE}
