"""Django settings.

Embedded defaults (no environment set) need no external service: SQLite in WAL mode under
var/, and an embedded Redis server on a unix socket (webapp/embedded_redis.py) that serves
both as the Celery broker and as the Channels layer. Production reads the environment:
DATABASE_URL (postgres://…), TRELLIS_REDIS_URL (redis://…), TRELLIS_SECRET_KEY,
TRELLIS_ALLOWED_HOSTS.

DEBUG is off unless TRELLIS_DEBUG=1. The studio counts as production when TRELLIS_PRODUCTION=1
or when it shares a database or a Redis with other machines (DATABASE_URL or
TRELLIS_REDIS_URL set). Production refuses to start without TRELLIS_SECRET_KEY and turns on
HTTPS-only cookies, HSTS and the redirect to HTTPS (behind a proxy that terminates TLS and
sets X-Forwarded-Proto), so that `manage.py check --deploy` is clean. The embedded default
(one machine, plain HTTP on localhost) gets a random key generated once into
var/secret_key (mode 0600) and keeps cookies usable over HTTP.
"""
import os
import sys
from datetime import timedelta
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from webapp.secret_key import PUBLISHED_KEYS, per_install_key

BASE_DIR = Path(__file__).resolve().parent.parent
# Tests get a folder of their own, so they never touch the studio's database, runs or archive.
_DEFAULT_VAR = BASE_DIR / "var" / ("pytest" if "pytest" in sys.modules else "")
VAR_DIR = Path(os.environ.get("TRELLIS_VAR_DIR", _DEFAULT_VAR))
if os.environ.get("PYTEST_XDIST_WORKER"):
    # A parallel test worker has a studio of its own: Redis socket, database, runs, archive.
    VAR_DIR = VAR_DIR / f"test-{os.environ['PYTEST_XDIST_WORKER']}"
VAR_DIR.mkdir(parents=True, exist_ok=True)  # SQLite, traces and artifacts live here


def _flag(name: str, default: bool = False) -> bool:
    value = os.environ.get(name, "").strip().lower()
    return default if not value else value in {"1", "true", "yes", "on"}


DEBUG = _flag("TRELLIS_DEBUG")
PRODUCTION = _flag("TRELLIS_PRODUCTION") or bool(os.environ.get("DATABASE_URL") or os.environ.get("TRELLIS_REDIS_URL"))

SECRET_KEY = os.environ.get("TRELLIS_SECRET_KEY", "").strip()
if SECRET_KEY in PUBLISHED_KEYS:
    raise ImproperlyConfigured("TRELLIS_SECRET_KEY is a key published in Trellis's repository; anyone can sign "
                               "cookies with it. Set a new one: python -c 'import secrets; "
                               "print(secrets.token_urlsafe(50))'")
if not SECRET_KEY:
    if PRODUCTION:
        raise ImproperlyConfigured("TRELLIS_SECRET_KEY is not set. A production studio (TRELLIS_PRODUCTION=1, "
                                   "DATABASE_URL or TRELLIS_REDIS_URL set) needs the same secret key on every "
                                   "machine; generate one with: python -c 'import secrets; "
                                   "print(secrets.token_urlsafe(50))'")
    SECRET_KEY = per_install_key(VAR_DIR / "secret_key")
elif PRODUCTION and (len(SECRET_KEY) < 40 or len(set(SECRET_KEY)) < 10):
    # Django's own check only warns; a short key is guessable, and it signs every session.
    raise ImproperlyConfigured(f"TRELLIS_SECRET_KEY has {len(SECRET_KEY)} characters ({len(set(SECRET_KEY))} "
                               "different); production needs at least 40, of at least 10 different characters. "
                               "Generate one with: python -c 'import secrets; print(secrets.token_urlsafe(50))'")


def _allowed_hosts() -> list[str]:
    named = [h.strip() for h in os.environ.get("TRELLIS_ALLOWED_HOSTS", "").split(",") if h.strip()]
    hosts = named or ["localhost", "127.0.0.1", "[::1]"]
    # `manage.py studio --host H` tells its web server which address it serves on.
    studio_host = os.environ.get("TRELLIS_STUDIO_HOST", "").strip()
    if studio_host in ("0.0.0.0", "::"):
        # Bound to every interface on one machine: reachable by any of its names and addresses,
        # which the studio cannot list; TRELLIS_ALLOWED_HOSTS names them to be stricter.
        if not named and not PRODUCTION:
            hosts.append("*")
    elif studio_host:
        hosts.append(f"[{studio_host}]" if ":" in studio_host else studio_host)
    return hosts


ALLOWED_HOSTS = _allowed_hosts()

INSTALLED_APPS = [
    "daphne",  # first, so that runserver serves ASGI (WebSockets included)
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "axes",  # sign-in throttling: the failed attempts it counts live in the database
    "webapp.accounts",
    "webapp.teams",
    "webapp.tasks",
    "webapp.runs",
    "webapp.annotations",
    "webapp.library",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",  # static files from the ASGI server itself
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "axes.middleware.AxesMiddleware",  # last: answers a locked-out sign-in with the lockout page
]
AUTHENTICATION_BACKENDS = ["webapp.accounts.backends.ThrottledBackend", "django.contrib.auth.backends.ModelBackend"]
# Sign-in throttling (django-axes): after TRELLIS_LOGIN_FAILURES wrong passwords from one address,
# or for one account, sign-ins from there (or to it) are refused for TRELLIS_LOGIN_LOCKOUT_MINUTES.
# `manage.py axes_reset` lifts every lockout at once.
AXES_FAILURE_LIMIT = int(os.environ.get("TRELLIS_LOGIN_FAILURES", "10"))
AXES_COOLOFF_TIME = timedelta(minutes=int(os.environ.get("TRELLIS_LOGIN_LOCKOUT_MINUTES", "15")))
AXES_LOCKOUT_PARAMETERS = ["ip_address", "username"]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "accounts/locked_out.html"
AXES_HTTP_RESPONSE_CODE = 429
AXES_IPWARE_PROXY_COUNT = int(os.environ.get("TRELLIS_PROXY_COUNT", "0")) or None
AXES_VERBOSE = False
# Content-Security-Policy (django-csp): scripts only from the studio itself, no inline script;
# styles inline too, which plotly and cytoscape set on the elements they draw.
CONTENT_SECURITY_POLICY = {"DIRECTIVES": {
    "default-src": ["'self'"], "script-src": ["'self'"], "style-src": ["'self'", "'unsafe-inline'"],
    "img-src": ["'self'", "data:", "blob:"], "font-src": ["'self'", "data:"], "connect-src": ["'self'"],
    "object-src": ["'none'"], "base-uri": ["'self'"], "form-action": ["'self'"], "frame-ancestors": ["'none'"],
}}
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

ROOT_URLCONF = "webapp.urls"
TEMPLATES = [{
    "BACKEND": "django.template.backends.django.DjangoTemplates",
    "DIRS": [BASE_DIR / "templates"],
    "APP_DIRS": True,
    "OPTIONS": {"context_processors": [
        "django.template.context_processors.request",
        "django.contrib.auth.context_processors.auth",
        "django.contrib.messages.context_processors.messages",
        "webapp.disk.context",
    ]},
}]
WSGI_APPLICATION = "webapp.wsgi.application"
ASGI_APPLICATION = "webapp.asgi.application"


def _database() -> dict:
    url = os.environ.get("DATABASE_URL")
    if url:
        import dj_database_url

        return dj_database_url.parse(url, conn_max_age=60)
    # The web process and the workers write the same file: WAL lets readers and the writer
    # proceed together, IMMEDIATE transactions queue writers instead of failing on upgrade.
    name = Path(os.environ.get("TRELLIS_DB_PATH", VAR_DIR / "trellis.sqlite3"))
    return {"ENGINE": "django.db.backends.sqlite3", "NAME": name,
            # A file, not memory, so that the tests' worker and web server share the test database.
            "TEST": {"NAME": name.with_name("test-" + name.name)},
            "OPTIONS": {"timeout": 30, "transaction_mode": "IMMEDIATE",
                        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"}}


DATABASES = {"default": _database()}

# One Redis serves as broker and channel layer. Embedded: a unix socket in var/redis/ (mode
# 0700), a per-install password, file-writing commands disabled (webapp/embedded_redis.py).
EMBEDDED_REDIS = not os.environ.get("TRELLIS_REDIS_URL")
if EMBEDDED_REDIS:
    from webapp import embedded_redis as _embedded_redis

    EMBEDDED_REDIS_SOCKET = _embedded_redis.socket_path(VAR_DIR)
    REDIS_URL = _embedded_redis.url(VAR_DIR)  # carries the password: never print it
else:
    REDIS_URL = os.environ["TRELLIS_REDIS_URL"]
CHANNEL_LAYERS = {"default": {
    "BACKEND": "channels_redis.core.RedisChannelLayer",
    # channels_redis waits up to 5 s on Redis for the next message: a socket timeout above
    # that keeps quiet runs' subscriptions open (redis-py's default of 5 s closed them). A web
    # process subscribes once per run however many browsers watch it (webapp/runs/fanout.py).
    "CONFIG": {"hosts": [{"address": REDIS_URL, "socket_timeout": 30, "max_connections": 2000}],
               "capacity": 2000, "expiry": 30},
}}
CELERY_BROKER_URL = ("redis+socket://" + REDIS_URL[len("unix://"):].split("?", 1)[0]  # kombu's spelling
                     if REDIS_URL.startswith("unix://") else REDIS_URL)
CELERY_TASK_ACKS_LATE = False  # a lost worker's run is resumed from its checkpoint, not redelivered
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Training jobs go to workers of their own (one process per device; webapp/runs/training.py),
# acknowledged once done, so that a worker killed mid-job has its job delivered again.
CELERY_TASK_ROUTES = {"webapp.runs.tasks.execute_run": {"queue": "runs"},
                      "webapp.runs.training.train": {"queue": "training"}}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True

# Applied wherever a person chooses a password: invitations, resets, manage.py user.
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator", "OPTIONS": {"min_length": 10}},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "static"
STATIC_ROOT.mkdir(exist_ok=True)  # whitenoise expects it; collectstatic fills it in production
WHITENOISE_USE_FINDERS = True  # serve static/ directly; no collectstatic step for the embedded studio
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

if PRODUCTION:
    # Behind a proxy that terminates TLS: it must set X-Forwarded-Proto (and strip any the
    # client sent), or every request looks like plain HTTP and is redirected forever.
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = _flag("TRELLIS_SSL_REDIRECT", default=True)
    SECURE_REDIRECT_EXEMPT = [r"^healthz$"]  # probed over plain HTTP from inside the network
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = int(os.environ.get("TRELLIS_HSTS_SECONDS", str(365 * 24 * 3600)))
    SECURE_HSTS_INCLUDE_SUBDOMAINS = _flag("TRELLIS_HSTS_INCLUDE_SUBDOMAINS", default=True)
    SECURE_HSTS_PRELOAD = _flag("TRELLIS_HSTS_PRELOAD", default=True)
    CSRF_TRUSTED_ORIGINS = [o.strip() for o in os.environ.get("TRELLIS_CSRF_TRUSTED_ORIGINS", "").split(",")
                            if o.strip()]

# Mail (invitations, password resets): printed on the console unless an SMTP server is given.
EMAIL_BACKEND = os.environ.get("TRELLIS_EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend"
                               if not os.environ.get("TRELLIS_EMAIL_HOST") else
                               "django.core.mail.backends.smtp.EmailBackend")
EMAIL_HOST = os.environ.get("TRELLIS_EMAIL_HOST", "localhost")
EMAIL_PORT = int(os.environ.get("TRELLIS_EMAIL_PORT", "587"))
EMAIL_HOST_USER = os.environ.get("TRELLIS_EMAIL_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("TRELLIS_EMAIL_PASSWORD", "")
EMAIL_USE_TLS = _flag("TRELLIS_EMAIL_TLS", default=True)
DEFAULT_FROM_EMAIL = os.environ.get("TRELLIS_EMAIL_FROM", "trellis@localhost")

TRELLIS_RUNS_DIR = VAR_DIR / "runs"
TRELLIS_ARCHIVE_DIR = VAR_DIR / "archive"
TRELLIS_EXAMPLES_DIR = BASE_DIR / "examples"
# Tasks people bring: uploaded zips are unpacked under TRELLIS_TASKS_DIR; a folder already on the
# server may be registered only from under one of TRELLIS_TASK_ROOTS (os.pathsep-separated).
TRELLIS_TASKS_DIR = VAR_DIR / "tasks"
# A project's own library (skills and references over the shared one): one folder per project here.
TRELLIS_PROJECT_LIBRARIES_DIR = VAR_DIR / "project-libraries"
TRELLIS_TASK_ROOTS = [Path(p) for p in os.environ.get(
    "TRELLIS_TASK_ROOTS", os.pathsep.join([str(TRELLIS_EXAMPLES_DIR), str(VAR_DIR / "task-folders")])).split(os.pathsep)
    if p.strip()]
TRELLIS_TASK_UPLOAD_MAX_BYTES = int(os.environ.get("TRELLIS_TASK_UPLOAD_MAX_BYTES", str(500 * 1024 * 1024)))
TRELLIS_TASK_UPLOAD_MAX_FILES = int(os.environ.get("TRELLIS_TASK_UPLOAD_MAX_FILES", "5000"))
# Below this much free space on the data disk, runs do not start and every page and /healthz say
# "disk full"; a worker holds a reserve file of TRELLIS_DISK_RESERVE_MB and gives it back when a
# write fails for want of space, so the run's state can still be recorded.
TRELLIS_MIN_FREE_MB = int(os.environ.get("TRELLIS_MIN_FREE_MB", "500"))
TRELLIS_DISK_RESERVE_MB = int(os.environ.get("TRELLIS_DISK_RESERVE_MB", "64"))
# What a browser user may point a run's models at (issue 37): API bases (a URL; its sub-paths too)
# and the names of environment variables holding keys, comma-separated. Anything else is refused,
# in the form and by the worker; a project may have more, added by staff in the admin.
TRELLIS_MODEL_ENDPOINTS = [u.strip() for u in os.environ.get("TRELLIS_MODEL_ENDPOINTS", "").split(",") if u.strip()]
TRELLIS_MODEL_KEY_VARIABLES = [v.strip() for v in os.environ.get("TRELLIS_MODEL_KEY_VARIABLES", "").split(",")
                               if v.strip()]
# Password-reset mails an hour, per address and per requesting IP (webapp/accounts/password_reset.py).
TRELLIS_PASSWORD_RESETS_PER_ADDRESS = int(os.environ.get("TRELLIS_PASSWORD_RESETS_PER_ADDRESS", "3"))
TRELLIS_PASSWORD_RESETS_PER_IP = int(os.environ.get("TRELLIS_PASSWORD_RESETS_PER_IP", "20"))
# A run whose worker has not reported for this long is shown as interrupted (worker lost).
TRELLIS_HEARTBEAT_STALE_S = int(os.environ.get("TRELLIS_HEARTBEAT_STALE_S", "45"))
# Annotation import (issue 26 item 15): a file of more bytes or rows is refused, nothing written,
# as is an import that would take a project past TRELLIS_ANNOTATION_PROJECT_MAX_ROWS annotations.
TRELLIS_ANNOTATION_IMPORT_MAX_BYTES = int(os.environ.get("TRELLIS_ANNOTATION_IMPORT_MAX_BYTES", str(20 * 1024 * 1024)))
TRELLIS_ANNOTATION_IMPORT_MAX_ROWS = int(os.environ.get("TRELLIS_ANNOTATION_IMPORT_MAX_ROWS", "10000"))
TRELLIS_ANNOTATION_PROJECT_MAX_ROWS = int(os.environ.get("TRELLIS_ANNOTATION_PROJECT_MAX_ROWS", "200000"))
