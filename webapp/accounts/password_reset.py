"""Password reset by mail, throttled: without a limit, anyone could have the studio send one
address thirty mails in a row (issue 37). A throttled request is answered exactly as a sent one
(the "sent" page), so the limit tells nobody whether an account exists.

The counts live in Django's cache: per web process with the default local-memory cache, so the
limits hold per process (several web processes each allow their share)."""
from __future__ import annotations

import hashlib

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.core.cache import cache
from django.http import HttpResponseRedirect

WINDOW_S = 3600


def _spend(key: str, limit: int) -> bool:
    """Count one request against ``key``; False once the window's limit is spent."""
    cache.add(key, 0, WINDOW_S)
    try:
        return cache.incr(key) <= limit
    except ValueError:  # expired between add and incr
        cache.set(key, 1, WINDOW_S)
        return True


class ThrottledPasswordResetView(auth_views.PasswordResetView):
    email_template_name = "registration/password_reset_email.txt"
    subject_template_name = "registration/password_reset_subject.txt"

    def form_valid(self, form):
        email = form.cleaned_data["email"].strip().lower()
        address = hashlib.sha256(email.encode()).hexdigest()[:32]
        ip = self.request.META.get("REMOTE_ADDR", "")
        allowed = (_spend(f"trellis:reset:mail:{address}", settings.TRELLIS_PASSWORD_RESETS_PER_ADDRESS)
                   and _spend(f"trellis:reset:ip:{ip}", settings.TRELLIS_PASSWORD_RESETS_PER_IP))
        if not allowed:
            return HttpResponseRedirect(self.get_success_url())
        return super().form_valid(form)
