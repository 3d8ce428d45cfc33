from django.apps import AppConfig


class AccountsConfig(AppConfig):
    """People's accounts: signing in (throttled), password reset by mail, and the ``user``
    command that manages accounts from a shell."""

    name = "webapp.accounts"
    verbose_name = "Trellis accounts"
