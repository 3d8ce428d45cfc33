from django.apps import AppConfig


class AnnotationsConfig(AppConfig):
    """A team's annotations on runs: label sets, queues, agreement, export and import."""

    name = "webapp.annotations"
    verbose_name = "Trellis annotations"
