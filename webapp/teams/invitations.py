"""Inviting people into a project: an owner makes a link (mailed when an address is given;
the console email backend prints it by default), and whoever opens it creates an account, or
signs in, and joins with the role it names. A link is good once and for INVITATION_DAYS."""
from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.conf import settings
from django.core.mail import send_mail
from django.db import transaction
from django.utils import timezone

from . import members
from .models import Invitation, Project, Role

INVITATION_DAYS = 7


class InvitationInvalid(Exception):
    """The link names no invitation, or one that was used, revoked or has expired."""


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def invite(project: Project, role: Role, by, email: str = "", base_url: str = "") -> tuple[Invitation, str]:
    """A new invitation and its link (shown once: only the token's hash is kept). Mailed to
    ``email`` when one is given."""
    token = secrets.token_urlsafe(24)
    row = Invitation.objects.create(project=project, role=int(role), created_by=by, email=email,
                                    token_sha256=_digest(token),
                                    expires=timezone.now() + timedelta(days=INVITATION_DAYS))
    link = f"{base_url.rstrip('/')}/invite/{token}"
    if email:
        inviter = by.get_username() if by is not None else "the studio"
        send_mail(f"Join {project.name} on Trellis",
                  f"{inviter} invites you to the project {project.name}, with the role {Role(role).label}.\n\n"
                  f"Open this link to create your account, or sign in, and join: {link}\n\n"
                  f"It works once and until {row.expires:%Y-%m-%d %H:%M} UTC.\n",
                  settings.DEFAULT_FROM_EMAIL, [email])
    return row, link


def find(token: str) -> Invitation:
    row = Invitation.objects.select_related("project").filter(token_sha256=_digest(token or "")).first()
    if row is None:
        raise InvitationInvalid("This invitation link is not known here: ask for a new one.")
    if row.state != "open":
        raise InvitationInvalid(f"This invitation was {row.state}: ask the project's owner for a new one.")
    return row


def accept(token: str, user) -> Invitation:
    """``user`` joins the invitation's project with its role (a higher role they have stays)."""
    with transaction.atomic():
        row = find(token)
        claimed = Invitation.objects.filter(pk=row.pk, accepted_at__isnull=True, revoked=False).update(
            accepted_at=timezone.now(), accepted_by=user)
        if not claimed:  # someone used it a moment ago
            raise InvitationInvalid("This invitation was just used: ask the project's owner for a new one.")
        current = row.project.memberships.filter(user=user).first()
        if current is None or current.role < row.role:
            members.add_member(row.project, user, Role(row.role))
    return row
