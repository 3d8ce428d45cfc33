"""A project's people: its members and their roles (owners manage them), invitations and
their links, and the audit log of who did what."""
from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth.decorators import login_not_required
from django.contrib.auth.forms import UserCreationForm
from django.core.paginator import Paginator
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from . import access, invitations, members
from .models import AuditEntry, Role, audit


@require_http_methods(["GET", "POST"])
def project_members(request: HttpRequest, project_id: int) -> HttpResponse:
    """The project's members, for its owners: add an existing user, change a role, remove."""
    project, _ = access.project_for(request.user, project_id, access.MANAGE)
    add_form = members.AddMemberForm(request.POST if request.POST.get("action") == "add" else None)
    invite_form = members.InviteForm(request.POST if request.POST.get("action") == "invite" else None)
    error, status = None, 200
    if request.method == "POST":
        action = request.POST.get("action")
        try:
            if action == "invite":
                if invite_form.is_valid():
                    email, role = invite_form.cleaned_data["email"], invite_form.cleaned_data["role"]
                    row, link = invitations.invite(project, role, request.user, email,
                                                   request.build_absolute_uri("/"))
                    audit(project, request.user, "invite", email=email, role=Role(role).label)
                    messages.success(request, f"Invitation as {Role(role).label}"
                                              f"{' mailed to ' + email if email else ''}. Its link, shown once: {link}")
                    return redirect("members", project_id=project.pk)
                status = 400
            elif action == "revoke-invite":
                project.invitations.filter(pk=request.POST.get("invitation") or 0, accepted_at__isnull=True).update(
                    revoked=True)
                messages.success(request, "The invitation was revoked; its link no longer works.")
                return redirect("members", project_id=project.pk)
            elif action == "add":
                if add_form.is_valid():
                    row = members.add_member(project, add_form.cleaned_data["username"], add_form.cleaned_data["role"])
                    audit(project, request.user, "members", change="add", member=row.user.get_username(),
                          role=row.get_role_display())
                    messages.success(request, f"{row.user.get_username()} is a {row.get_role_display()} of {project.name}")
                    return redirect("members", project_id=project.pk)
                status = 400
            elif action in ("role", "remove"):
                form = (members.ChangeRoleForm if action == "role" else members.RemoveMemberForm)(request.POST)
                if not form.is_valid():
                    raise members.MemberError("choose a member and a role")
                if action == "role":
                    row = members.set_role(project, form.cleaned_data["member"], form.cleaned_data["role"])
                    audit(project, request.user, "members", change="role", member=row.user.get_username(),
                          role=row.get_role_display())
                    messages.success(request, f"{row.user.get_username()} is now a {row.get_role_display()}")
                else:
                    row = members.remove_member(project, form.cleaned_data["member"])
                    audit(project, request.user, "members", change="remove", member=row.user.get_username(),
                          role=row.get_role_display())
                    messages.success(request, f"{row.user.get_username()} is no longer a member of {project.name}")
                return redirect("members", project_id=project.pk)
            else:
                raise members.MemberError(f"unknown action {action!r}")
        except members.MemberError as exc:
            error, status = str(exc), 409
    rows = project.memberships.select_related("user")
    return render(request, "teams/members.html", {"project": project, "members": rows, "add_form": add_form,
                                                 "invite_form": invite_form, "invitations": project.invitations.all()[:50],
                                                 "roles": Role.choices, "error": error}, status=status)


@login_not_required
def accept_invitation(request: HttpRequest, token: str) -> HttpResponse:
    """An invitation link: a new person creates their account here; someone signed in joins as
    themselves. Either way they join the project with the invitation's role, once."""
    try:
        row = invitations.find(token)
    except invitations.InvitationInvalid as exc:
        return render(request, "teams/invite.html", {"invalid": str(exc)}, status=410)
    form = None if request.user.is_authenticated else UserCreationForm(request.POST or None)
    if request.method == "POST" and (form is None or form.is_valid()):
        try:
            # one transaction: when someone else used the link a moment before, no account is left
            with transaction.atomic():
                user = request.user if form is None else form.save()
                if form is not None and row.email:
                    user.email = row.email
                    user.save(update_fields=["email"])
                invitations.accept(token, user)
        except invitations.InvitationInvalid as exc:
            return render(request, "teams/invite.html", {"invalid": str(exc)}, status=410)
        if form is not None:
            login(request, user, backend="django.contrib.auth.backends.ModelBackend")
        audit(row.project, user, "joined", role=Role(row.role).label)
        messages.success(request, f"You joined {row.project.name}; your role: {Role(row.role).label}.")
        return redirect("home")
    return render(request, "teams/invite.html", {"invitation": row, "role": Role(row.role).label, "form": form},
                  status=400 if form is not None and form.errors else 200)


def audit_log(request: HttpRequest, project_id: int) -> HttpResponse:
    """Every person's action in the project, newest first, filtered by action; reviewers and up."""
    project, _ = access.project_for(request.user, project_id, access.REVIEW)
    rows = AuditEntry.objects.filter(project=project).select_related("run")
    action = request.GET.get("action", "")
    if action:
        rows = rows.filter(action=action)
    page = Paginator(rows, 100).get_page(request.GET.get("page"))
    return render(request, "teams/audit.html", {"project": project, "page": page, "action": action,
                                               "actions": AuditEntry.ACTIONS})
