"""A project's own library: skills and references its reviewers write over the shared library,
read by that project's runs alone (the shared one is staff's: every project's runs read it)."""
from __future__ import annotations

from pathlib import Path

from django.conf import settings

from engine.library.store import Library, load_library
from webapp.teams.models import Project


def project_overlay(project: Project) -> Path:
    """Where a project's own skills and references live (derived, never stored: any machine finds it)."""
    return Path(settings.TRELLIS_PROJECT_LIBRARIES_DIR) / str(project.pk)


def library_for(project: Project | None) -> Library:
    """The library a project's runs read: the shared one, with the project's own over it."""
    return load_library(overlay=project_overlay(project)) if project is not None else load_library()


def run_library(project: Project) -> Library | None:
    """What a run of ``project`` is given: its library when the project has one of its own, else
    None (the engine loads the shared one itself)."""
    overlay = project_overlay(project)
    return library_for(project) if overlay.is_dir() and any(overlay.glob("*.md")) else None
