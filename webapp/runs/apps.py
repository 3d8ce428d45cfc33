from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "webapp.runs"
    verbose_name = "Trellis runs"
