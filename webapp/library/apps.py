from django.apps import AppConfig


class LibraryConfig(AppConfig):
    name = "webapp.library"
    verbose_name = "Trellis library"
