"""Issue 9.4: safe settings. Before this, DEBUG was on by default, the secret key was published
in the repository, and with TRELLIS_DEBUG=0 and no key the studio started anyway, so a session
cookie signed with the public key was accepted. Now DEBUG is off unless asked for, production
refuses to start without its own key, the embedded default generates a key per install, the
published key is refused everywhere, and `check --deploy` is clean with production settings.

Settings are read once per process, so each environment runs `manage.py` in a subprocess."""
from __future__ import annotations

import os
import secrets
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.contrib.sessions.backends.db import SessionStore
from django.test import Client, RequestFactory, override_settings
from django.views.defaults import server_error

ROOT = Path(__file__).resolve().parents[2]
PUBLISHED_KEY = "trellis-embedded-development-key-not-for-production"
SETTINGS_ENV = ("TRELLIS_SECRET_KEY", "TRELLIS_PRODUCTION", "TRELLIS_DEBUG", "TRELLIS_ALLOWED_HOSTS",
                "DATABASE_URL", "TRELLIS_REDIS_URL", "TRELLIS_STUDIO_HOST", "TRELLIS_DB_PATH")


def manage(var_dir: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    """`manage.py *args` in a fresh process: the embedded default plus ``env``."""
    base = {k: v for k, v in os.environ.items() if k not in SETTINGS_ENV}
    base.update(TRELLIS_VAR_DIR=str(var_dir), DJANGO_SETTINGS_MODULE="webapp.settings",
                LITELLM_LOCAL_MODEL_COST_MAP="True", **env)
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=base, capture_output=True,
                          text=True, timeout=120)


def shell(var_dir: Path, code: str, **env: str) -> str:
    proc = manage(var_dir, "shell", "-c", code, **env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()[-1]  # Django 5.2's shell first says what it imported


def a_strong_key() -> str:
    return secrets.token_urlsafe(50)


@pytest.mark.parametrize("production_env", [
    {"TRELLIS_PRODUCTION": "1"},
    {"DATABASE_URL": "sqlite:////tmp/trellis-settings-test.sqlite3"},
    {"TRELLIS_REDIS_URL": "redis://redis.internal:6379/0"},
])
def test_production_without_a_secret_key_refuses_to_start(tmp_path, production_env):
    proc = manage(tmp_path, "check", **production_env)
    assert proc.returncode != 0
    assert "ImproperlyConfigured: TRELLIS_SECRET_KEY is not set" in proc.stderr


def test_the_published_key_is_refused_even_when_set_on_purpose(tmp_path):
    proc = manage(tmp_path, "check", TRELLIS_SECRET_KEY=PUBLISHED_KEY)
    assert proc.returncode != 0
    assert "TRELLIS_SECRET_KEY is a key published in Trellis's repository" in proc.stderr


def test_check_deploy_is_clean_with_production_settings(tmp_path):
    proc = manage(tmp_path, "check", "--deploy", TRELLIS_PRODUCTION="1", TRELLIS_SECRET_KEY=a_strong_key(),
                  TRELLIS_ALLOWED_HOSTS="example.org")
    assert proc.returncode == 0, proc.stderr
    assert "System check identified no issues (0 silenced)." in proc.stdout
    assert "WARNING" not in proc.stdout + proc.stderr


def test_the_embedded_default_generates_one_private_key_per_install_and_keeps_it(tmp_path):
    code = "from django.conf import settings; print(settings.SECRET_KEY)"
    first = shell(tmp_path, code)
    key_file = tmp_path / "secret_key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert key_file.read_text().strip() == first
    assert len(first) >= 50 and first != PUBLISHED_KEY
    assert shell(tmp_path, code) == first                     # reused, so sessions survive a restart
    assert shell(tmp_path / "other-install", code) != first   # and another install has its own


def test_debug_is_off_by_default_and_pages_fail_without_debug_information(tmp_path):
    code = ("from django.conf import settings; from django.test import Client; c = Client(); "
            "r = c.get('/no/such/page', HTTP_HOST='localhost'); s = c.get('/static/css/trellis.css', "
            "HTTP_HOST='localhost'); print(settings.DEBUG, r.status_code, b'URL patterns' in r.content, "
            "b'Back to the studio' in r.content, s.status_code)")
    # Off: the studio's own 404 page (no URL list) and static files still served by whitenoise.
    assert shell(tmp_path, code) == "False 404 False True 200"
    assert shell(tmp_path, code, TRELLIS_DEBUG="1").startswith("True 404 True")


def test_the_studio_host_is_allowed_without_debug(tmp_path):
    code = "from django.conf import settings; print(settings.ALLOWED_HOSTS)"
    hosts = shell(tmp_path, code, TRELLIS_STUDIO_HOST="10.1.2.3")
    assert "'10.1.2.3'" in hosts and "'localhost'" in hosts and "'127.0.0.1'" in hosts


@pytest.mark.django_db
def test_a_session_signed_with_the_published_key_is_rejected(django_user_model):
    user = django_user_model.objects.create_user("mallory-target", password="a-long-password-1")

    def session_cookie() -> str:
        store = SessionStore()
        store[SESSION_KEY] = str(user.pk)
        store[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
        store[HASH_SESSION_KEY] = user.get_session_auth_hash()
        store.save()
        return store.session_key

    with override_settings(SECRET_KEY=PUBLISHED_KEY):  # what anyone could build from the repository
        forged = session_cookie()
    genuine = session_cookie()

    client = Client()
    client.cookies[settings.SESSION_COOKIE_NAME] = forged
    page = client.get("/")
    assert page.status_code == 302 and page.url.startswith("/login/")
    client.cookies[settings.SESSION_COOKIE_NAME] = genuine  # the same cookie, built with the install's key
    assert client.get("/").status_code == 200
    assert PUBLISHED_KEY not in settings.SECRET_KEY_FALLBACKS  # old cookies get no second chance


def test_the_500_page_is_the_studios_own_and_needs_no_request_context():
    page = server_error(RequestFactory().get("/"))
    assert page.status_code == 500
    assert b"The studio hit an error" in page.content and b"css/trellis.css" in page.content
