"""Share-link pages: what someone without an account sees through a link, and the owner's list
of a run's links (create, revoke).

A link's pages mirror the run's own: /share/<signed>/<rest> is /runs/<id>/<rest> (its JSON, its
fragments, its trace, the replay page where there is one), served by the same views with a
``ShareViewer`` in place of the person, so what it shows is exactly what a viewer of the run
sees and nothing of any other run. Only GET and HEAD pass: any other method through a link is
refused with 403 before a view is reached, and the run's links in the pages are rewritten to
stay inside the link."""
from __future__ import annotations

import re

from django.contrib.auth.decorators import login_not_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.urls import Resolver404, resolve, reverse
from django.views.decorators.http import require_http_methods, require_POST

from webapp.teams import access
from webapp.teams.models import Role

from . import evidence, fragments, live, sharing, visibility
from .models import ShareLink

READ_METHODS = ("GET", "HEAD")
# Responses whose text names the run's URLs (pages, fragments, JSON); artifacts are left as stored.
_REWRITTEN = re.compile(r"^(text/html|application/json)")


def _refused(request: HttpRequest, status: int, message: str) -> HttpResponse:
    return render(request, "runs/share_refused.html", {"message": message, "status": status}, status=status)


def _open(request: HttpRequest, signed: str) -> ShareLink | HttpResponse:
    """The usable link, with the request now made by its ShareViewer; or the refusal page."""
    if request.method not in READ_METHODS:
        return _refused(request, 403, "A share link is read-only: nothing can be changed through it.")
    try:
        link = sharing.resolve(signed)
    except sharing.ShareRefused as exc:
        return _refused(request, exc.status, str(exc))
    # This request only: whoever holds the link sees what it shares, signed in or not.
    request.user = visibility.ShareViewer(link)
    return link


def _rewrite(response: HttpResponse, link: ShareLink, signed: str) -> HttpResponse:
    """Point the run's own URLs in ``response`` at the link's, the WebSocket at its share form."""
    if getattr(response, "streaming", False) or not _REWRITTEN.match(response.get("Content-Type", "")):
        return response
    prefix = f"/share/{signed}/"
    text = response.content.decode(response.charset or "utf-8").replace(f"/runs/{link.run_id}/", prefix)
    text = text.replace(f"/ws{prefix}", f"/ws/runs/{link.run_id}/?share={signed}")
    response.content = text.encode(response.charset or "utf-8")
    return response


def _page(request: HttpRequest, link: ShareLink, signed: str, replay_missing: bool = False) -> HttpResponse:
    run = link.run
    recent = [live.stored_message(e) for e in reversed(run.events.order_by("-seq")[:14])]
    context = {"recent": recent, **fragments.run_context(run, Role.VIEWER), "person_kinds": evidence.PERSON_KINDS,
               "max_note_chars": evidence.MAX_NOTE_CHARS, "share": link, "share_prefix": f"/share/{signed}/",
               "replay_missing": replay_missing}
    return render(request, "runs/share_run.html", context)


@login_not_required
def share_root(request: HttpRequest, signed: str) -> HttpResponse:
    """The shared run's page (live), or its replay page for a replay link."""
    link = _open(request, signed)
    if isinstance(link, HttpResponse):
        return link
    if link.mode == "replay":
        response = _mirror(request, link, "replay")
        if response is not None:
            return _rewrite(response, link, signed)
        return _rewrite(_page(request, link, signed, replay_missing=True), link, signed)
    return _rewrite(_page(request, link, signed), link, signed)


@login_not_required
def share_path(request: HttpRequest, signed: str, rest: str) -> HttpResponse:
    """/share/<signed>/<rest>: the run's /runs/<id>/<rest>, read-only."""
    link = _open(request, signed)
    if isinstance(link, HttpResponse):
        return link
    response = _mirror(request, link, rest)
    if response is None:
        raise Http404("nothing of this run at that address")
    return _rewrite(response, link, signed)


def _mirror(request: HttpRequest, link: ShareLink, rest: str) -> HttpResponse | None:
    """The run's own view for ``rest``, called as the link's ShareViewer; None if there is none."""
    try:
        match = resolve(f"/runs/{link.run_id}/{rest}")
    except Resolver404:
        return None
    # Only the run's own pages: a path that resolves to another run (or to no run) opens nothing.
    if match.kwargs.get("run_id") != link.run_id:
        return None
    return match.func(request, *match.args, **match.kwargs)


def _links_fragment(request: HttpRequest, run, error: str | None = None, new: ShareLink | None = None,
                    status: int = 200) -> HttpResponse:
    rows = [{"link": row, "url": request.build_absolute_uri(reverse("share_run", args=[sharing.sign(row)]))}
            for row in sharing.links_of(run)]
    chosen = request.POST.get("expiry") if request.POST.get("expiry") in sharing.EXPIRY else "1d"
    return render(request, "runs/share_links.html", {"run": run, "rows": rows, "error": error, "new": new,
                                                     "expiry": [(k, label) for k, (label, _) in sharing.EXPIRY.items()],
                                                     "chosen": chosen, "mode": request.POST.get("mode", "live")},
                  status=status)


@require_http_methods(["GET", "POST"])
def share_links(request: HttpRequest, run_id: int) -> HttpResponse:
    """The run's share links, for its project's owners; POST creates one."""
    run, _ = visibility.run_for(request.user, run_id, access.MANAGE)
    if request.method == "POST":
        try:
            link = sharing.create(run, request.user, request.POST.get("expiry", ""), request.POST.get("mode", "live"),
                                  request.POST.get("note", ""))
        except sharing.ShareError as exc:
            return _links_fragment(request, run, error=str(exc), status=400)
        return _links_fragment(request, run, new=link)
    return _links_fragment(request, run)


@require_POST
def share_revoke(request: HttpRequest, run_id: int, link_id: int) -> HttpResponse:
    run, _ = visibility.run_for(request.user, run_id, access.MANAGE)
    link = get_object_or_404(ShareLink.objects.select_related("run__task__project"), pk=link_id, run=run)
    if not sharing.revoke(link, request.user):
        return _links_fragment(request, run, error=f"link {link.pk} was revoked already", status=409)
    return _links_fragment(request, run)
