"""People: an owner invites by link or mail, the invitee creates an account and joins with the
role, once; a forgotten password is reset by mail; accounts are managed with manage.py user."""
from __future__ import annotations

import io
import re

import pytest
from django.core import mail
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from tests.studio_harness import add_member
from webapp.teams.models import Invitation, Membership, Project, Role

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def project(demo_user) -> Project:
    p = Project.objects.create(name="Lab")
    add_member(p, demo_user, "owner")
    return p


def _owner(demo_user) -> Client:
    c = Client()
    c.force_login(demo_user)
    return c


def test_an_invited_person_creates_an_account_and_joins_with_the_role_once(project, demo_user, django_user_model):
    owner = _owner(demo_user)
    page = owner.post(f"/projects/{project.pk}/members", {"action": "invite", "email": "grace@lab.org",
                                                          "role": Role.ANNOTATOR}, follow=True)
    link = re.search(r"/invite/[A-Za-z0-9_-]+", page.content.decode()).group(0)
    assert len(mail.outbox) == 1 and link in mail.outbox[0].body and mail.outbox[0].to == ["grace@lab.org"]
    assert Invitation.objects.get().token_sha256 not in link  # only the hash is stored

    stranger = Client()
    form = stranger.get(link)
    assert form.status_code == 200 and "Join Lab" in form.content.decode() and "with the role <strong>annotator" in form.content.decode()
    joined = stranger.post(link, {"username": "grace", "password1": "hopper-1906-cobol", "password2": "hopper-1906-cobol"})
    assert joined.status_code == 302
    grace = django_user_model.objects.get(username="grace")
    assert grace.email == "grace@lab.org"
    assert Membership.objects.get(project=project, user=grace).role == Role.ANNOTATOR
    assert "Lab" in stranger.get("/").content.decode()  # signed in, and sees the project
    again = Client().get(link)
    assert again.status_code == 410 and "accepted" in again.content.decode()


def test_a_revoked_or_expired_invitation_lets_nobody_in(project, demo_user):
    from django.utils import timezone

    owner = _owner(demo_user)
    page = owner.post(f"/projects/{project.pk}/members", {"action": "invite", "role": Role.VIEWER}, follow=True)
    link = re.search(r"/invite/[A-Za-z0-9_-]+", page.content.decode()).group(0)
    row = Invitation.objects.get()
    owner.post(f"/projects/{project.pk}/members", {"action": "revoke-invite", "invitation": row.pk})
    assert Client().get(link).status_code == 410
    Invitation.objects.filter(pk=row.pk).update(revoked=False, expires=timezone.now())
    response = Client().post(link, {"username": "eve", "password1": "x-long-password-1", "password2": "x-long-password-1"})
    assert response.status_code == 410 and "expired" in response.content.decode()
    assert not Membership.objects.filter(user__username="eve").exists()


def test_only_an_owner_invites(project, django_user_model):
    reviewer = django_user_model.objects.create_user("rita", password="x" * 12)
    add_member(project, reviewer, "reviewer")
    c = Client()
    c.force_login(reviewer)
    assert c.post(f"/projects/{project.pk}/members", {"action": "invite", "role": Role.OWNER}).status_code == 403
    assert not Invitation.objects.exists()


def test_a_forgotten_password_is_reset_by_mail(demo_user):
    demo_user.email = "ada@lab.org"
    demo_user.save()
    c = Client()
    assert "Forgot your password?" in c.get("/login/").content.decode()
    assert c.post("/password-reset/", {"email": "ada@lab.org"}).status_code == 302
    link = re.search(r"http://testserver(/password-reset/\S+/)", mail.outbox[0].body).group(1)
    form = c.get(link, follow=True)
    assert "Choose a new password" in form.content.decode()
    done = c.post(form.redirect_chain[-1][0], {"new_password1": "analytical-engine-9", "new_password2": "analytical-engine-9"})
    assert done.status_code == 302
    assert Client().login(username="ada", password="analytical-engine-9")


def test_manage_user_adds_lists_resets_deactivates_and_invites(project, django_user_model, monkeypatch):
    out = io.StringIO()
    call_command("user", "add", "linus", "--email", "l@lab.org", stdout=out)
    password = re.search(r"password set to (\S+)", out.getvalue()).group(1)
    assert Client().login(username="linus", password=password)
    monkeypatch.setattr("sys.stdin", io.StringIO("123\n"))
    with pytest.raises(CommandError, match="too short|too common|numeric"):
        call_command("user", "password", "linus", "--password-stdin", stdout=io.StringIO())
    listing = io.StringIO()
    call_command("user", "list", stdout=listing)
    assert "linus\tl@lab.org\tno project" in listing.getvalue() and "Lab (owner)" in listing.getvalue()
    call_command("user", "deactivate", "linus", stdout=io.StringIO())
    assert not Client().login(username="linus", password=password)
    invited = io.StringIO()
    call_command("user", "invite", "Lab", "--role", "reviewer", "--base-url", "https://trellis.lab.org", stdout=invited)
    assert re.search(r"https://trellis\.lab\.org/invite/\S+", invited.getvalue())
    with pytest.raises(CommandError, match="exists already"):
        call_command("user", "add", "linus", stdout=io.StringIO())
