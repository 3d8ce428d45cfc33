from django.apps import AppConfig


class TeamsConfig(AppConfig):
    """Projects and who is in them: members and their roles, invitations, the audit log."""

    name = "webapp.teams"
    verbose_name = "Trellis teams"
