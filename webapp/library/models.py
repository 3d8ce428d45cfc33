"""The library's own rows: every version of a skill or reference a person wrote in the studio."""
from __future__ import annotations

from django.conf import settings
from django.db import models

from webapp.teams.models import Project


class LibraryEdit(models.Model):
    """One saved version of a library skill or resource, written by a person in the studio: the
    file under the library folder is what synthesis reads (engine/library/); this row says who
    wrote which version when, and keeps every version's text (a file holds only the latest)."""

    name = models.CharField(max_length=64)
    kind = models.CharField(max_length=16)
    text = models.TextField()
    version = models.CharField(max_length=64)
    author = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    note = models.CharField(max_length=500, blank=True)
    created = models.DateTimeField(auto_now_add=True)
    # None: the shared library (staff); else the project whose own library it was written into
    project = models.ForeignKey(Project, null=True, blank=True, on_delete=models.CASCADE, related_name="library_edits")

    class Meta:
        db_table = "runs_libraryedit"  # written before the library was an app of its own
        ordering = ["-created"]
        indexes = [models.Index(fields=["kind", "name", "-created"])]

    def __str__(self) -> str:
        return f"{self.kind}:{self.name}@{self.version[:12]}"
