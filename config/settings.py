"""Reckon's one settings module, driven by environment variables (see .env.example)."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent


def envbool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    if value.lower() in ("1", "true", "yes", "on"):
        return True
    if value.lower() in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{name} must be a boolean (true/false), got {value!r}")


def envint(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {value!r}") from None


def database_from_url(url: str) -> dict:
    parts = urlsplit(url)
    if parts.scheme not in ("postgres", "postgresql"):
        raise ValueError(
            f"DATABASE_URL must be a postgresql:// URL (Reckon needs PostgreSQL), got {parts.scheme!r}"
        )
    return {
        "NAME": unquote(parts.path.lstrip("/")) or "reckon",
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "",
        "PORT": str(parts.port or ""),
    }


def envlist(name: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, "").split(",") if item.strip()]


# Django's own rule for a strong key (check security.W009): at least 50 characters, at least 5
# distinct ones, and not the `django-insecure-` prefix startproject writes.
SECRET_KEY_MIN_LENGTH = 50
SECRET_KEY_MIN_UNIQUE_CHARACTERS = 5
DEVELOPMENT_SECRET_KEY = "reckon-local-development-only-not-secret"  # nosec B105  # the published development key, refused whenever RECKON_DEBUG is off
# Keys that were published (.env.example's placeholder, this file's development key): never secret.
PUBLISHED_SECRET_KEYS = frozenset({"change-me", "changeme", DEVELOPMENT_SECRET_KEY})


def secret_key_problem(key: str) -> str | None:
    """Why `key` cannot sign production sessions, or None when it can."""
    if not key:
        return "is not set"
    if key.strip().lower() in PUBLISHED_SECRET_KEYS:
        return "is a published placeholder"
    if key.startswith("django-insecure-"):
        return "starts with django-insecure-"
    if len(key) < SECRET_KEY_MIN_LENGTH:
        return f"has {len(key)} characters; it needs at least {SECRET_KEY_MIN_LENGTH}"
    if len(set(key)) < SECRET_KEY_MIN_UNIQUE_CHARACTERS:
        return f"has fewer than {SECRET_KEY_MIN_UNIQUE_CHARACTERS} distinct characters"
    return None


# Off unless asked for: `make run` and the tests turn it on; a deployment never has to remember to.
DEBUG = envbool("RECKON_DEBUG", False)
SECRET_KEY = os.environ.get("RECKON_SECRET_KEY", "")
if DEBUG:
    SECRET_KEY = SECRET_KEY or DEVELOPMENT_SECRET_KEY
elif problem := secret_key_problem(SECRET_KEY):
    raise ImproperlyConfigured(
        f"RECKON_SECRET_KEY {problem}. With RECKON_DEBUG=false Reckon needs a secret key of its own: "
        f"at least {SECRET_KEY_MIN_LENGTH} random characters, e.g. the output of "
        "`python -c 'import secrets; print(secrets.token_urlsafe(50))'`. (For local development, set "
        "RECKON_DEBUG=true instead.)"
    )
ALLOWED_HOSTS = os.environ.get("RECKON_ALLOWED_HOSTS", "127.0.0.1,localhost,testserver").split(",")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "template_partials",
    "pgtrigger",
    "django_q",
    "axes",
    "csp",
    "config",  # the project's own wiring: the periodic schedules (config/schedules.py)
    "ledger",
    "reconciliation",
    "approvals",
    "console",
    "sandbox",
    "api",
    "chaos",
    "bench",
    "alerts",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Last, as django-axes asks: it turns a locked-out login into the locked-out page.
    "axes.middleware.AxesMiddleware",
]
# django-axes refuses a locked-out login before any password is checked.
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend"]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

if os.environ.get("DATABASE_URL"):
    _database = database_from_url(os.environ["DATABASE_URL"])
elif not DEBUG and not envbool("RECKON_EMBEDDED_DB", False):
    raise ImproperlyConfigured(
        "RECKON_DEBUG is false and DATABASE_URL is not set. Set DATABASE_URL=postgresql://user:pass@host:5432/"
        "reckon: the embedded PostgreSQL in .pgdata/ is a development database (RECKON_EMBEDDED_DB=true "
        "allows it anyway)."
    )
else:
    from config.localdb import ensure_cluster

    _database = ensure_cluster()

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        **_database,
        "CONN_MAX_AGE": envint("RECKON_CONN_MAX_AGE", 60),
        "CONN_HEALTH_CHECKS": True,
        # Which process holds a session, visible in pg_stat_activity.
        "OPTIONS": {
            "application_name": f"reckon:{os.getpid()}",
            # Statements bound server-side (only the worker steps' calls; Django binds the rest on
            # the client) are prepared after 5 runs on a connection. RECKON_DB_PREPARE=false turns
            # this off behind a connection pooler that cannot keep prepared statements.
            "prepare_threshold": 5 if envbool("RECKON_DB_PREPARE", True) else None,
        },
        "TEST": {"NAME": os.environ.get("RECKON_TEST_DATABASE") or None},
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = BASE_DIR / "staticfiles"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True
# Static files come from the finders unless `collectstatic` has filled STATIC_ROOT (production).
if not STATIC_ROOT.exists():
    import warnings

    warnings.filterwarnings("ignore", message="No directory at")

# django-q2 on the same PostgreSQL. Its ORM broker is at-least-once with no fencing: Reckon's
# own ledger provides leases and compare-and-set. `timeout` < `retry`, and a small prefetch so
# tasks do not age in a cluster's local queue.
Q_CLUSTER = {
    "name": "reckon",
    "orm": "default",
    "workers": envint("RECKON_Q_WORKERS", 2),
    "timeout": envint("RECKON_Q_TIMEOUT", 60),
    "retry": envint("RECKON_Q_RETRY", 90),
    "max_attempts": 5,
    "queue_limit": 4,
    "bulk": 1,
    "catch_up": False,
    # A task that raised (the database was down) is not acknowledged: django-q2 delivers it again.
    "ack_failures": False,
    "save_limit": 1000,
    "poll": 0.2,
    "label": "Tasks",
}

# The actions this deployment runs: modules imported at start-up that register them (with
# `ledger.actions.action` or `register`). `reckon.echo` is always there. Demo mode (RECKON_DEMO=true;
# `runstack` without --no-demo sets it for its children) adds the demo's actions for the sandbox.
RECKON_DEMO = envbool("RECKON_DEMO", False)
RECKON_DEMO_ACTION_MODULE = "sandbox.demo_actions"
RECKON_ACTION_MODULES = envlist("RECKON_ACTION_MODULES")
if RECKON_DEMO and RECKON_DEMO_ACTION_MODULE not in RECKON_ACTION_MODULES:
    RECKON_ACTION_MODULES.append(RECKON_DEMO_ACTION_MODULE)
# The actions file (TOML; ledger/declarations.py): read when it exists; when the variable is set,
# it must exist.
RECKON_ACTIONS_FILE_REQUIRED = bool(os.environ.get("RECKON_ACTIONS_FILE"))
RECKON_ACTIONS_FILE = Path(os.environ.get("RECKON_ACTIONS_FILE") or BASE_DIR / "actions.toml")

# How often the lease sweeper loop runs (django-q2's scheduler cannot go below one minute).
RECKON_SWEEP_INTERVAL = float(os.environ.get("RECKON_SWEEP_INTERVAL", "5"))
# The providers the demo actions call (the sandbox by default; any service with its contract).
RECKON_SANDBOX_URL = os.environ.get("RECKON_SANDBOX_URL", "http://127.0.0.1:8765").rstrip("/")
RECKON_BILLING_URL = os.environ.get("RECKON_BILLING_URL", RECKON_SANDBOX_URL).rstrip("/")
RECKON_MAIL_URL = os.environ.get("RECKON_MAIL_URL", RECKON_SANDBOX_URL).rstrip("/")
RECKON_PUBLISH_URL = os.environ.get("RECKON_PUBLISH_URL", RECKON_SANDBOX_URL).rstrip("/")
RECKON_VAULT_URL = os.environ.get("RECKON_VAULT_URL", RECKON_SANDBOX_URL).rstrip("/")
RECKON_PROVIDER_TIMEOUT = float(os.environ.get("RECKON_PROVIDER_TIMEOUT", "10"))
# The SMTP server `smtp.send_mail` sends through, and the API that finds a sent message by its
# Message-ID (the SMTP sandbox by default; SMTP itself has no read path).
RECKON_SMTP_HOST = os.environ.get("RECKON_SMTP_HOST", "127.0.0.1")
RECKON_SMTP_PORT = envint("RECKON_SMTP_PORT", 8025)
RECKON_SMTP_LOOKUP_URL = os.environ.get("RECKON_SMTP_LOOKUP_URL", "http://127.0.0.1:8026").rstrip("/")
RECKON_SMTP_FROM = os.environ.get("RECKON_SMTP_FROM", "reckon@localhost")
RECKON_DEMO_LEASE_TTL = float(os.environ.get("RECKON_DEMO_LEASE_TTL", "30"))
# The dead-man gate: irreversible side effects wait while the sweeper or the reconciler has not
# completed a pass within this many seconds (0 disables the gate).
RECKON_GATE_BOUND_S = float(os.environ.get("RECKON_GATE_BOUND_S", "120"))
# Queued work unclaimed this long is dispatched again by the sweeper (its delivery was lost).
RECKON_REDISPATCH_AFTER_S = float(os.environ.get("RECKON_REDISPATCH_AFTER_S", "120"))
# Dispatch run_job to django-q2 when a job is enqueued or reopened.
RECKON_DISPATCH = envbool("RECKON_DISPATCH", True)

# Reconciliation and approvals. A lookup that says nothing definite is retried after
# base * 2**(n-1) seconds (capped, with jitter); after MAX_CHECKS such looks a human decides.
RECKON_RECONCILE_BACKOFF_BASE = float(os.environ.get("RECKON_RECONCILE_BACKOFF_BASE", "2"))
RECKON_RECONCILE_BACKOFF_CAP = float(os.environ.get("RECKON_RECONCILE_BACKOFF_CAP", "300"))
RECKON_RECONCILE_MAX_CHECKS = envint("RECKON_RECONCILE_MAX_CHECKS", 8)
RECKON_RECONCILE_BATCH = envint("RECKON_RECONCILE_BATCH", 100)
# Provider lookups a reconciliation pass runs at once.
RECKON_RECONCILE_CONCURRENCY = envint("RECKON_RECONCILE_CONCURRENCY", 4)
# A claimed job is not due again for this long: longer than the slowest lookup (two calls).
RECKON_RECONCILE_CLAIM_TTL = float(os.environ.get("RECKON_RECONCILE_CLAIM_TTL", "60"))
RECKON_RECONCILE_INTERVAL = float(os.environ.get("RECKON_RECONCILE_INTERVAL", "2"))
RECKON_APPROVAL_TTL_HOURS = float(os.environ.get("RECKON_APPROVAL_TTL_HOURS", "24"))
RECKON_RECOVERY_WINDOW_MINUTES = envint("RECKON_RECOVERY_WINDOW_MINUTES", 30)

# -- Hardening: cookies, headers, limits, login throttling, the worker API and /metrics ---------
import ipaddress  # here rather than at the top: only the hardening settings use them
from datetime import timedelta


def envnetworks(name: str, default: str) -> list[str]:
    """A comma-separated list of IP addresses or networks (`10.0.0.5`, `10.0.0.0/8`, `::1`)."""
    networks = []
    for item in filter(None, (part.strip() for part in os.environ.get(name, default).split(","))):
        try:
            networks.append(str(ipaddress.ip_network(item, strict=False)))
        except ValueError:
            raise ValueError(f"{name} must list IP addresses or networks (10.0.0.0/8, ::1), got {item!r}") from None
    return networks


# Secure transport settings switch on with RECKON_DEBUG=false, so that
# `manage.py check --deploy --fail-level WARNING` is clean in production; each is overridable.
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SECURE = envbool("RECKON_SESSION_COOKIE_SECURE", not DEBUG)
CSRF_COOKIE_SECURE = envbool("RECKON_CSRF_COOKIE_SECURE", not DEBUG)
SECURE_SSL_REDIRECT = envbool("RECKON_SSL_REDIRECT", not DEBUG)
# Probes and Prometheus scrape over plain HTTP on the host itself.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^metrics$"]
SECURE_HSTS_SECONDS = envint("RECKON_HSTS_SECONDS", 0 if DEBUG else 31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = envbool("RECKON_HSTS_INCLUDE_SUBDOMAINS", True)
SECURE_HSTS_PRELOAD = envbool("RECKON_HSTS_PRELOAD", True)
if envbool("RECKON_BEHIND_TLS_PROXY", False):  # the proxy terminates TLS and sets X-Forwarded-Proto
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
# Content-Security-Policy (django-csp): everything is served from our own origin (htmx included);
# no inline scripts or styles, no plugins, no framing.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}
DATA_UPLOAD_MAX_MEMORY_SIZE = envint("RECKON_MAX_REQUEST_BYTES", 1024 * 1024)
RECKON_API_MAX_BODY_BYTES = envint("RECKON_API_MAX_BODY_BYTES", 256 * 1024)
# Workers waiting for work (POST /api/v1/claims with wait_seconds): a waiting claim holds no
# database connection, but it occupies one server thread for its wait, so each web process holds
# at most RECKON_CLAIM_WAITS of them (keep it below gunicorn's --threads, leaving threads for the
# console and the lease writes); beyond that, and under a single-threaded server, a claim answers
# at once (204, Retry-After). A waiting claim is woken by a NOTIFY when work arrives, and looks
# again every RECKON_CLAIM_POLL_S seconds in case a wake-up was lost.
RECKON_CLAIM_WAITS = envint("RECKON_CLAIM_WAITS", 2)
RECKON_CLAIM_POLL_S = float(os.environ.get("RECKON_CLAIM_POLL_S", "5"))
# The reverse proxies / load balancers in front of the web processes (addresses or networks).
# When the direct peer is one of them, the client address is taken from X-Forwarded-For (the
# rightmost hop that is not itself a trusted proxy); from any other peer X-Forwarded-For is
# ignored. The login throttle and the /metrics allow-list key on that address
# (config.hardening.client_address). Empty: the direct peer is the client.
RECKON_TRUSTED_PROXIES = envnetworks("RECKON_TRUSTED_PROXIES", "")
# Login throttling (django-axes, on /accounts/login/ and /admin/login/ alike). Failures count per
# (username, client address) pair, the username normalised as Django does (NFKC) and case-folded;
# LIMIT failures lock that pair until WINDOW seconds pass without another try, and a success
# clears its count. Another address or another username is not held up, so nobody can lock a
# colleague out from elsewhere. Attempts are rows in PostgreSQL: the limit holds across web
# processes and hosts.
RECKON_LOGIN_FAILURE_LIMIT = envint("RECKON_LOGIN_FAILURE_LIMIT", 5)
RECKON_LOGIN_FAILURE_WINDOW = envint("RECKON_LOGIN_FAILURE_WINDOW", 15 * 60)
AXES_HANDLER = "axes.handlers.database.AxesDatabaseHandler"
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_FAILURE_LIMIT = RECKON_LOGIN_FAILURE_LIMIT
AXES_COOLOFF_TIME = timedelta(seconds=RECKON_LOGIN_FAILURE_WINDOW)
AXES_USERNAME_CALLABLE = "config.hardening.login_username"
AXES_CLIENT_IP_CALLABLE = "config.hardening.client_address"
AXES_LOCKOUT_CALLABLE = "config.hardening.locked_out"
AXES_RESET_ON_SUCCESS = True
# /metrics: with RECKON_DEBUG=false it needs this bearer token *and* an allowed client address
# (without a token it answers 403 saying so); in debug, either one opens it.
RECKON_METRICS_TOKEN = os.environ.get("RECKON_METRICS_TOKEN", "")
RECKON_METRICS_ALLOW = envnetworks("RECKON_METRICS_ALLOW", "127.0.0.1,::1")
# -- end of hardening ----------------------------------------------------------------------------

# -- alerts (alerts/) ------------------------------------------------------------------------------
# Where alerts go: a Slack-compatible webhook ({"text": ...}) and/or these email addresses.
RECKON_ALERT_WEBHOOK_URL = os.environ.get("RECKON_ALERT_WEBHOOK_URL", "")
RECKON_ALERT_EMAILS = envlist("RECKON_ALERT_EMAILS")
RECKON_ALERT_EMAIL_FROM = os.environ.get("RECKON_ALERT_EMAIL_FROM", "reckon@localhost")
# The console's address as people reach it, for the links alerts carry (unset: paths only).
RECKON_CONSOLE_URL = os.environ.get("RECKON_CONSOLE_URL", "").rstrip("/")
# Alert when the oldest unknown job / the oldest pending approval is older than this (seconds).
RECKON_ALERT_UNKNOWN_AGE_S = float(os.environ.get("RECKON_ALERT_UNKNOWN_AGE_S", "3600"))
RECKON_ALERT_APPROVAL_WAIT_S = float(os.environ.get("RECKON_ALERT_APPROVAL_WAIT_S", "3600"))
# Django's mail backend sends alert emails through this SMTP server.
EMAIL_HOST = os.environ.get("RECKON_EMAIL_HOST", "localhost")
EMAIL_PORT = envint("RECKON_EMAIL_PORT", 25)
# An evaluation holds its alert row locked while it sends; with the webhook's 5 s, four conditions
# stay inside the cluster's task timeout even when both channels hang.
EMAIL_TIMEOUT = 5

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {
        "reckon": {"handlers": ["console"], "level": os.environ.get("RECKON_LOG_LEVEL", "INFO")},
    },
}
