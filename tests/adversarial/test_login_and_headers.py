"""Found by the attacker: 60 wrong passwords were all answered, pages had no
Content-Security-Policy, and a 5-character production secret key only warned."""
from __future__ import annotations

import pytest
from django.test import Client

from tests.adversarial.test_settings import manage

pytestmark = pytest.mark.django_db(transaction=True)


def _sign_in(client: Client, password: str, name: str = "ada", ip: str = "203.0.113.7"):
    return client.post("/login/", {"username": name, "password": password}, REMOTE_ADDR=ip)


def test_wrong_passwords_lock_the_address_and_the_account_out_for_a_while(demo_user, settings):
    client = Client()
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        assert _sign_in(client, "guess").status_code == 200  # the form again, "do not match"
    locked = _sign_in(client, "guess")
    assert locked.status_code == 429 and "Too many wrong passwords" in locked.content.decode()
    # now even the right password is refused from there ...
    assert _sign_in(client, "lovelace-1843").status_code == 429
    # ... and for that account from anywhere, while another person from elsewhere signs in
    assert _sign_in(Client(), "lovelace-1843", ip="198.51.100.1").status_code == 429
    from django.contrib.auth import get_user_model

    get_user_model().objects.create_user("grace", password="hopper-1906-cobol")
    assert _sign_in(Client(), "hopper-1906-cobol", name="grace", ip="198.51.100.1").status_code == 302


def test_every_page_says_scripts_come_only_from_the_studio(demo_user):
    client = Client()
    client.force_login(demo_user)
    for url in ("/", "/login/", "/tasks/new"):
        policy = client.get(url).headers.get("Content-Security-Policy", "")
        directives = dict((d.split(" ", 1) + [""])[:2] for d in (p.strip() for p in policy.split(";")) if d)
        assert directives.get("script-src") == "'self'", url  # no inline script, no eval
        assert "'none'" in directives.get("frame-ancestors", "") and "'none'" in directives.get("object-src", "")


@pytest.mark.parametrize("key", ["abcde", "a" * 64])
def test_a_weak_production_secret_key_refuses_to_start(tmp_path, key):
    proc = manage(tmp_path, "check", TRELLIS_PRODUCTION="1", TRELLIS_SECRET_KEY=key,
                  TRELLIS_ALLOWED_HOSTS="example.org")
    assert proc.returncode != 0 and "production needs at least 40" in proc.stderr
