"""Sign-in throttling on the studio's sign-in form.

django-axes' backend counts failed sign-ins per address and per account and refuses them once
locked out. It insists on the HTTP request; a sign-in without one (the test client, a shell,
a management command) is nobody guessing passwords over the network, so it is not counted."""
from __future__ import annotations

from axes.backends import AxesStandaloneBackend


class ThrottledBackend(AxesStandaloneBackend):
    def authenticate(self, request=None, username=None, password=None, **kwargs):
        if request is None:
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)
