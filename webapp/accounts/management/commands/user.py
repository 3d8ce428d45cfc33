"""python manage.py user add|list|password|deactivate|invite: the studio's people from a shell.

  user add NAME [--email E] [--admin] [--password-stdin]   a new account (a random password is
                                                           printed when none is piped in)
  user list                                                every account, its projects and roles
  user password NAME [--password-stdin]                    a new password (random if none given)
  user deactivate NAME                                     no more sign-ins; their records stay
  user invite PROJECT --role R [--email E] [--base-url U]  an invitation link (mailed to E)
"""
from __future__ import annotations

import secrets
import sys

from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import ValidationError, validate_password
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.executor import MigrationExecutor

from webapp.teams import invitations
from webapp.teams.models import Project, Role

ROLES = {r.label: r for r in Role}


class Command(BaseCommand):
    help = "Manage the studio's people: add, list, password, deactivate, invite."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        add = sub.add_parser("add", help="a new account")
        add.add_argument("name")
        add.add_argument("--email", default="")
        add.add_argument("--admin", action="store_true", help="a superuser: sees every project, uses /admin/")
        add.add_argument("--password-stdin", action="store_true", help="read the password from standard input")
        sub.add_parser("list", help="every account with its projects and roles")
        password = sub.add_parser("password", help="set a new password")
        password.add_argument("name")
        password.add_argument("--password-stdin", action="store_true")
        deactivate = sub.add_parser("deactivate", help="no more sign-ins (records and annotations stay)")
        deactivate.add_argument("name")
        invite = sub.add_parser("invite", help="an invitation link into a project")
        invite.add_argument("project")
        invite.add_argument("--role", choices=list(ROLES), default="viewer")
        invite.add_argument("--email", default="")
        invite.add_argument("--base-url", default="http://127.0.0.1:8000",
                            help="the studio's address as people reach it")

    def handle(self, *args, **o):
        self._database_ready()
        getattr(self, "_" + o["action"])(o)

    def _database_ready(self) -> None:
        """A fresh var folder has no tables yet (a traceback said "no such table: auth_user"):
        they are made first, as the studio makes them when it starts."""
        executor = MigrationExecutor(connections[DEFAULT_DB_ALIAS])
        if executor.migration_plan(executor.loader.graph.leaf_nodes()):
            self.stderr.write("the studio's database is not set up yet (a new var folder): setting it up first")
            call_command("migrate", verbosity=0, interactive=False)

    def _password(self, o: dict, user=None) -> None:
        user = user or self._user(o["name"])
        if o.get("password_stdin"):
            password, shown = sys.stdin.readline().rstrip("\n"), False
        else:
            password, shown = secrets.token_urlsafe(12), True
        try:
            validate_password(password, user)
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from None
        user.set_password(password)
        user.save()
        self.stdout.write(f"{user.get_username()}: password set" + (f" to {password}" if shown else ""))

    def _add(self, o: dict) -> None:
        model = get_user_model()
        if model.objects.filter(username=o["name"]).exists():
            raise CommandError(f"{o['name']!r} exists already (user password {o['name']} sets a new password)")
        user = model(username=o["name"], email=o["email"], is_staff=o["admin"], is_superuser=o["admin"])
        self._password(o, user)

    def _list(self, o: dict) -> None:
        users = get_user_model().objects.order_by("username").prefetch_related("memberships__project")
        if not users.exists():
            self.stdout.write("no accounts yet: python manage.py user add NAME (or start the studio: ./trellis demo)")
        for user in users:
            roles = ", ".join(f"{m.project.name} ({m.get_role_display()})" for m in user.memberships.all())
            flags = " admin" if user.is_superuser else ""
            flags += "" if user.is_active else " deactivated"
            self.stdout.write(f"{user.get_username()}{flags}\t{user.email or '-'}\t{roles or 'no project'}")

    def _deactivate(self, o: dict) -> None:
        user = self._user(o["name"])
        user.is_active = False
        user.save(update_fields=["is_active"])
        self.stdout.write(f"{user.get_username()} can no longer sign in")

    def _invite(self, o: dict) -> None:
        project = Project.objects.filter(name=o["project"]).first()
        if project is None:
            raise CommandError(f"no project {o['project']!r}")
        row, link = invitations.invite(project, ROLES[o["role"]], None, o["email"], o["base_url"])
        self.stdout.write(f"invitation to {project.name} as {o['role']}"
                          f"{', mailed to ' + o['email'] if o['email'] else ''}: {link}")

    def _user(self, name: str):
        user = get_user_model().objects.filter(username=name).first()
        if user is None:
            raise CommandError(f"no user {name!r}")
        return user
