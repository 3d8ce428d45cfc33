"""Which runs a person sees, and as what: a run is seen through its project (webapp/teams/access.py),
or through a share link, which shows its one run read-only. A run or mutation the person cannot
see answers 404, exactly like one that does not exist."""
from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404

from webapp.teams.access import VIEW, admit, visible_projects
from webapp.teams.models import Role

from .models import Mutation, Run


class ShareViewer:
    """Whoever opened a share link (webapp/runs/sharing.py): no account, the viewer role on the
    link's one run and nothing else: not its project, not its mutations, no write of any kind."""

    is_authenticated = False
    is_active = True
    is_superuser = False
    is_anonymous = True

    def __init__(self, link) -> None:
        self.link = link

    def get_username(self) -> str:
        return f"share-link:{self.link.pk}"


def visible_runs(user) -> QuerySet[Run]:
    return Run.objects.filter(task__project__in=visible_projects(user))


def run_for(user, run_id: int, min_role: Role = VIEW) -> tuple[Run, Role]:
    """The run and the user's role in its project."""
    if isinstance(user, ShareViewer):  # the link's own run, read-only; any other id is unknown
        run = Run.objects.select_related("task__project").filter(pk=run_id, pk__in=[user.link.run_id]).first()
        if run is None:
            raise Http404("no such run")
        if min_role > VIEW:
            raise PermissionDenied("a share link is read-only")
        return run, Role.VIEWER
    run = Run.objects.select_related("task__project").filter(pk=run_id).first()
    return run, admit(user, run.task.project if run else None, min_role, "run")


def mutation_for(user, mutation_id: int, min_role: Role) -> tuple[Mutation, Role]:
    row = Mutation.objects.select_related("run__task__project").filter(pk=mutation_id).first()
    return row, admit(user, row.run.task.project if row else None, min_role, "mutation")
