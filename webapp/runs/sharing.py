"""Share links: a read-only view of one run (live while it runs) or of its replay, for someone
without an account. The URL carries the link's token and run id signed with the install's
secret (django.core.signing), so a guessed or edited URL is refused before the database is
asked; the ShareLink row is what makes a link expire and lets its owner revoke it.

Whoever opens a link is a ``ShareViewer`` (webapp/runs/access.py): the viewer role on that one
run only, never a member of its project, and every write through the link is refused (403)."""
from __future__ import annotations

from datetime import timedelta

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.core import signing
from django.db import transaction
from django.utils import timezone

from webapp.teams.models import audit

from .models import Run, ShareLink

SALT = "trellis.share-link"
EXPIRY = {"1h": ("1 hour", timedelta(hours=1)), "1d": ("1 day", timedelta(days=1)),
          "7d": ("7 days", timedelta(days=7))}
MODES = ("live", "replay")


class ShareRefused(Exception):
    """The link opens nothing: 404 for one that is not a link of ours, 410 for revoked or expired."""

    def __init__(self, status: int, message: str):
        self.status = status
        super().__init__(message)


class ShareError(ValueError):
    """An owner's form asked for something a link cannot be (unknown expiry or mode)."""


def sign(link: ShareLink) -> str:
    """The URL part for ``link``: its token and run id, signed (no '/' in it)."""
    return signing.dumps({"t": link.token, "r": link.run_id}, salt=SALT)


def resolve(signed: str) -> ShareLink:
    """The usable link ``signed`` names; ShareRefused otherwise."""
    try:
        data = signing.loads(signed, salt=SALT)
        token, run_id = str(data["t"]), int(data["r"])
    except (signing.BadSignature, KeyError, TypeError, ValueError):
        raise ShareRefused(404, "This is not a valid share link: it may have been copied incompletely.")
    link = ShareLink.objects.select_related("run__task__project").filter(token=token, run_id=run_id).first()
    if link is None:
        raise ShareRefused(404, "This share link does not exist (any more).")
    check_usable(link)
    return link


def check_usable(link: ShareLink) -> None:
    if link.revoked is not None:
        raise ShareRefused(410, f"This share link was revoked on {link.revoked:%Y-%m-%d %H:%M} UTC. "
                                "Ask the run's owner for a new one.")
    if link.expires <= timezone.now():
        raise ShareRefused(410, f"This share link expired on {link.expires:%Y-%m-%d %H:%M} UTC. "
                                "Ask the run's owner for a new one.")


def create(run: Run, user, expiry: str, mode: str = "live", note: str = "") -> ShareLink:
    """A new link to ``run``, audited. ``expiry`` is a key of EXPIRY."""
    if expiry not in EXPIRY:
        raise ShareError(f"choose how long the link lasts: {', '.join(label for label, _ in EXPIRY.values())}")
    if mode not in MODES:
        raise ShareError(f"a share link shows the live run or its replay, not {mode[:20]!r}")
    with transaction.atomic():
        link = ShareLink.objects.create(run=run, mode=mode, expires=timezone.now() + EXPIRY[expiry][1],
                                        created_by=user, note=note.strip()[:200])
        audit(run.task.project, user, "share_created", run=run, link=link.pk, mode=mode,
              expires=link.expires.isoformat(), note=link.note)
    return link


def revoke(link: ShareLink, user) -> bool:
    """Revoke ``link`` (audited) and close the pages open on it; False when it was revoked already."""
    with transaction.atomic():
        if not ShareLink.objects.filter(pk=link.pk, revoked__isnull=True).update(revoked=timezone.now()):
            return False
        audit(link.run.task.project, user, "share_revoked", run=link.run, link=link.pk, mode=link.mode)
    link.refresh_from_db()
    transaction.on_commit(lambda: _disconnect(link))
    return True


def _disconnect(link: ShareLink) -> None:
    """Tell the run's WebSocket group; the consumers open on this link close (webapp/runs/consumers.py).
    A channel layer that is down only delays that to their next message, where the link is checked."""
    try:
        async_to_sync(get_channel_layer().group_send)(link.run.group, {"type": "share.revoked", "token": link.token})
    except Exception:  # noqa: BLE001 - best effort, see above
        pass


def links_of(run: Run) -> list[ShareLink]:
    return list(ShareLink.objects.filter(run=run).select_related("created_by"))
