"""The operator's bounds on the models a browser user may point a run at (issue 37, item 1).

A run's model settings come from a form anyone with a project can fill in, but they are carried
out by a worker holding the studio's secrets: an endpoint chosen in the browser would receive the
worker's requests, and a key variable chosen there would send any of its environment with them.
So the endpoints and key variables a project may use are the operator's: the studio-wide lists
in settings (``TRELLIS_MODEL_ENDPOINTS``, ``TRELLIS_MODEL_KEY_VARIABLES``) and the project's own
lists, which only staff edit (the admin). The engine holds every endpoint a run resolves to this
policy (engine/models.py ``EndpointPolicy``), the form and the fork form say it first.
"""
from __future__ import annotations

from django.conf import settings

from engine.models import EndpointPolicy
from webapp.teams.models import Project


def _lines(text: str) -> tuple[str, ...]:
    return tuple(line.strip() for line in (text or "").replace(",", "\n").splitlines() if line.strip())


def policy_for(project: Project | None) -> EndpointPolicy:
    """The studio's lists, with the project's own added (none for a project not created yet)."""
    bases = tuple(settings.TRELLIS_MODEL_ENDPOINTS)
    keys = tuple(settings.TRELLIS_MODEL_KEY_VARIABLES)
    if project is not None:
        bases += _lines(project.model_endpoints)
        keys += _lines(project.model_key_variables)
    return EndpointPolicy(api_bases=tuple(dict.fromkeys(bases)), key_envs=tuple(dict.fromkeys(keys)))


def policy_for_name(name: str | None) -> EndpointPolicy:
    return policy_for(Project.objects.filter(name=name).first() if name else None)
