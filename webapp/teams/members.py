"""Managing a project's members (owners only; the view checks that): add an existing user
with a role, change a member's role, remove a member. A project always keeps an owner."""
from __future__ import annotations

from django import forms
from django.contrib.auth import get_user_model
from django.db import transaction

from . import access
from .models import Membership, Project, Role


class ProjectTaken(Exception):
    """The project exists and this person may not add to it (project names are unique, so a
    refusal says no more than that)."""


class MemberError(Exception):
    """The change would leave the project without an owner, or names no member."""


class AddMemberForm(forms.Form):
    username = forms.CharField(max_length=150)
    role = forms.TypedChoiceField(choices=Role.choices, coerce=int, initial=Role.VIEWER)

    def clean_username(self) -> object:
        name = self.cleaned_data["username"].strip()
        user = get_user_model().objects.filter(username=name, is_active=True).first()
        if user is None:
            raise forms.ValidationError(f"no user named {name!r}: they need an account first")
        return user


class InviteForm(forms.Form):
    email = forms.EmailField(required=False, help_text="mailed the link; blank: copy the link yourself")
    role = forms.TypedChoiceField(choices=Role.choices, coerce=int, initial=Role.VIEWER)


class ChangeRoleForm(forms.Form):
    member = forms.IntegerField()
    role = forms.TypedChoiceField(choices=Role.choices, coerce=int)


class RemoveMemberForm(forms.Form):
    member = forms.IntegerField()


def add_member(project: Project, user, role: Role) -> Membership:
    """Add the user, or change their role if they are a member already."""
    with transaction.atomic():
        existing = Membership.objects.select_for_update().filter(project=project, user=user).first()
        if existing:
            return set_role(project, existing.pk, role)
        return Membership.objects.create(project=project, user=user, role=role)


def set_role(project: Project, member_id: int, role: Role) -> Membership:
    with transaction.atomic():
        row = _member(project, member_id)
        if row.role == Role.OWNER and role != Role.OWNER:
            _keep_an_owner(project, row)
        row.role = role
        row.save(update_fields=["role"])
        return row


def remove_member(project: Project, member_id: int) -> Membership:
    with transaction.atomic():
        row = _member(project, member_id)
        if row.role == Role.OWNER:
            _keep_an_owner(project, row)
        row.delete()
        return row


def _member(project: Project, member_id: int) -> Membership:
    row = Membership.objects.select_for_update().select_related("user").filter(project=project, pk=member_id).first()
    if row is None:
        raise MemberError("no such member of this project")
    return row


def _keep_an_owner(project: Project, leaving: Membership) -> None:
    others = (Membership.objects.select_for_update().filter(project=project, role=Role.OWNER)
              .exclude(pk=leaving.pk))
    if not others.exists():
        raise MemberError(f"{leaving.user.get_username()} is the last owner of {project.name}; "
                          "make someone else an owner first")


def project_to_write(user, name: str) -> tuple[Project, bool]:
    """The project named ``name`` if ``user`` is one of its reviewers, or a new one they own (and
    whether it is new). ProjectTaken otherwise."""
    project, created = Project.objects.get_or_create(name=name)
    if created:
        Membership.objects.create(project=project, user=user, role=Role.OWNER)
    elif (access.role_of(user, project) or 0) < access.REVIEW:
        raise ProjectTaken
    return project, created
