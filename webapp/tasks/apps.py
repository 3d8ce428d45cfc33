from django.apps import AppConfig


class TasksConfig(AppConfig):
    """The task folders a project's runs work on: adding one (uploaded or registered), its
    preflight, and approving a drafted evaluator."""

    name = "webapp.tasks"
    verbose_name = "Trellis tasks"
