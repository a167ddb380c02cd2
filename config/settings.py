"""Reckon's one settings module, driven by environment variables.

Every variable is read through `config.env.setting` (or recorded with `declare` when another
module reads it), which is what docs/configuration.md and .env.example are generated from
(`manage.py config_reference`); a test fails when a module reads a variable declared nowhere.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from config.database_url import database_from_url
from config.env import (
    Bool,
    Float,
    Int,
    List,
    Networks,
    Pairs,
    Rates,
    Sets,
    Share,
    Str,
    Url,
    declare,
    load_dotenv,
    secret_names,
    setting,
)
from config.paths import CODE_DIR, PROJECT_DIR

# BASE_DIR holds the code (the checkout, or site-packages when installed); Reckon's own files
# (.env, actions.toml, staticfiles/) live in PROJECT_DIR: the checkout, or the working directory
# of an installed process (config/paths.py).
BASE_DIR = CODE_DIR
load_dotenv(PROJECT_DIR / ".env")

CORE = "Core"
DATABASE = "Database"
EMBEDDED = "Embedded PostgreSQL (development)"
ACTIONS = "Actions"
WORKERS = "Workers, sweeper and dead-man gate"
RECONCILIATION = "Reconciliation, approvals and recovery"
PROVIDERS = "Providers (the demo's actions and the sandboxes)"
SECURITY = "Security and hardening"
API = "Worker API"
EXAMPLES = "The examples' own variables (examples/, read by those programs, not by Reckon)"
HARNESS = "Fault points, tests and benchmarks"
ALERTS = "Alerts"
SIGN_IN = "Sign-in: identity providers (OpenID Connect) and break-glass accounts"
HISTORY = "History: partitions, retention and archives"


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
DEBUG = setting("RECKON_DEBUG", False, Bool, "Development mode: debug pages, the development secret key, the embedded database and the demo. Off unless asked for; `make run` and the tests set it. Never in production.", group=CORE)
SECRET_KEY = setting("RECKON_SECRET_KEY", "", Str, "Signs sessions and CSRF tokens, and keys the encryption of break-glass TOTP secrets. Required with debug off: at least 50 random characters (`python -c 'import secrets; print(secrets.token_urlsafe(50))'`); published placeholders are refused.", group=CORE, example="change-me", secret=True)
if DEBUG:
    SECRET_KEY = SECRET_KEY or DEVELOPMENT_SECRET_KEY
elif problem := secret_key_problem(SECRET_KEY):
    raise ImproperlyConfigured(
        f"RECKON_SECRET_KEY {problem}. With RECKON_DEBUG=false Reckon needs a secret key of its own: "
        f"at least {SECRET_KEY_MIN_LENGTH} random characters, e.g. the output of "
        "`python -c 'import secrets; print(secrets.token_urlsafe(50))'`. (For local development, set "
        "RECKON_DEBUG=true instead.)"
    )
SECRET_KEY_FALLBACKS = setting("RECKON_SECRET_KEY_FALLBACKS", [], List, "Comma-separated earlier secret keys, kept while RECKON_SECRET_KEY is rotated: sessions signed and TOTP secrets encrypted with them are still read, and the MCP gateway finds the calls whose job ids were keyed under them (keep a key here as long as the ledger or its archives hold such calls, or their next identical call runs again).", group=CORE, secret=True)
ALLOWED_HOSTS = setting("RECKON_ALLOWED_HOSTS", ["127.0.0.1", "localhost", "testserver"], List, "Comma-separated host names the web server answers to. Set it to your public host name in production.", group=CORE, example="reckon.example.com")

INSTALLED_APPS = [
    "console.admin_app.ReckonAdminConfig",  # django.contrib.admin, for superusers only
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
    "gateway",
    # Sign-in through identity providers (sso/): django-allauth's OpenID Connect provider, and its
    # TOTP for break-glass accounts. Only the provider log-in and callback URLs are served
    # (config/urls.py): no sign-up, password reset or e-mail pages.
    "sso",  # before allauth: its templates (the provider error page) replace allauth's
    "allauth",
    "allauth.account",
    "allauth.socialaccount",
    "allauth.socialaccount.providers.openid_connect",
    "allauth.mfa",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # /api/v1/ (Bearer tokens, no cookies) goes from here straight to its view (api/lane.py).
    "api.lane.WorkerApiLane",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "allauth.account.middleware.AccountMiddleware",
    # A provider's session is checked again after RECKON_OIDC_REVALIDATE_S (roles re-read).
    "sso.middleware.ProviderSessionRevalidation",
    # A password session ends after RECKON_PASSWORD_SESSION_S, or once RECKON_SSO_ONLY refuses it.
    "sso.middleware.PasswordSessionBound",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # The console's own "Not found", with debug on too (Django's lists every URL pattern).
    "console.not_found.OwnNotFoundPage",
    # A view that met a database without a primary answers 503 with Retry-After (a failover).
    "config.unavailable.DatabaseUnavailable",
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
        # The console's templates are package data (console/templates), found with the app's.
        "DIRS": [],
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

_DATABASE_URL = setting("DATABASE_URL", "", Str, "The PostgreSQL database, `postgresql://user:pass@host:5432/reckon`. "
                        "Unset: the embedded cluster in .pgdata/ (debug only). Required in production.", group=DATABASE,
                        example="postgresql://reckon:secret@db.internal:5432/reckon", secret=True)
_EMBEDDED_DB = setting("RECKON_EMBEDDED_DB", False, Bool, "Allow the embedded PostgreSQL with debug off (a single-host "
                       "trial; production sets DATABASE_URL).", group=DATABASE)
if _DATABASE_URL:
    _database = database_from_url(_DATABASE_URL)
elif not DEBUG and not _EMBEDDED_DB:
    raise ImproperlyConfigured(
        "RECKON_DEBUG is false and DATABASE_URL is not set. Set DATABASE_URL=postgresql://user:pass@host:5432/"
        "reckon: the embedded PostgreSQL in .pgdata/ is a development database (RECKON_EMBEDDED_DB=true "
        "allows it anyway)."
    )
else:
    from config.localdb import connection_settings

    # Nothing starts here: the embedded backend starts the cluster on the first connection.
    _database = {"ENGINE": "config.embedded_db", **connection_settings()}

# Behind a pooler in transaction mode (PgBouncer's `pool_mode = transaction`) a server session is
# shared between transactions: nothing may outlive one. So no server-side prepared statements
# (PgBouncer before 1.21 loses them), no server-side cursors (Django's WITH HOLD cursors), and the
# claims listener's LISTEN goes to RECKON_DIRECT_DATABASE_URL (docs/deploying/high-availability.md).
RECKON_DATABASE_POOLED = setting("RECKON_DATABASE_POOLED", False, Bool, "DATABASE_URL goes through a connection pooler in transaction mode (PgBouncer `pool_mode = transaction`): prepared statements and server-side cursors are turned off, and the web processes LISTEN through RECKON_DIRECT_DATABASE_URL. `check --deploy` warns when that is unset.", group=DATABASE)
RECKON_DIRECT_DATABASE_URL = setting("RECKON_DIRECT_DATABASE_URL", "", Str, "The database without the pooler (the same multi-host URL as DATABASE_URL would be), for the one session a transaction pooler cannot carry: each web process's LISTEN that wakes waiting claims. Unset: the claims listener uses DATABASE_URL.", group=DATABASE, example="postgresql://reckon:secret@db1:5432,db2:5432/reckon?target_session_attrs=read-write", secret=True)
# Parsed here, as DATABASE_URL is: the claims listener (api/waiting.py) connects with these settings.
RECKON_DIRECT_DATABASE = database_from_url(RECKON_DIRECT_DATABASE_URL) if RECKON_DIRECT_DATABASE_URL else None
_PREPARE = setting("RECKON_DB_PREPARE", True, Bool, "Prepare the worker steps' statements server-side. Set false behind a pooler in transaction mode that cannot keep prepared statements (PgBouncer before 1.21); RECKON_DATABASE_POOLED turns it off too.", group=DATABASE)

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        **_database,
        "CONN_MAX_AGE": setting("RECKON_CONN_MAX_AGE", 60, Int, "Seconds a web or worker process keeps its database connection (0: one per request). Lower it behind a pooler that limits connections.", group=DATABASE),
        "CONN_HEALTH_CHECKS": True,
        # Which process holds a session, visible in pg_stat_activity.
        "OPTIONS": {
            "application_name": f"reckon:{os.getpid()}",
            # DATABASE_URL's own parameters (target_session_attrs=read-write, sslmode...) win.
            **_database.pop("OPTIONS", {}),
            # Statements bound server-side (only the worker steps' calls; Django binds the rest on
            # the client) are prepared after 5 runs on a connection. RECKON_DB_PREPARE=false turns
            # this off behind a connection pooler that cannot keep prepared statements.
            "prepare_threshold": 5 if _PREPARE and not RECKON_DATABASE_POOLED else None,
        },
        "DISABLE_SERVER_SIDE_CURSORS": RECKON_DATABASE_POOLED,
        "TEST": {"NAME": setting("RECKON_TEST_DATABASE", None, Str, "The test database's name (default: test_ plus the database name); the harnesses give each run its own.", group=HARNESS, internal=True)},
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
# The console's static files are package data (console/static), found with the app's.
STATIC_ROOT = PROJECT_DIR / "staticfiles"
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
    "workers": setting("RECKON_Q_WORKERS", 2, Int, "Worker processes per django-q2 cluster (`qcluster`). Raise it for more in-process actions at once.", group=WORKERS),
    "timeout": setting("RECKON_Q_TIMEOUT", 60, Int, "Seconds django-q2 lets one task run before killing it; keep it below RECKON_Q_RETRY.", group=WORKERS),
    "retry": setting("RECKON_Q_RETRY", 90, Int, "Seconds after which django-q2 delivers an unacknowledged task again (the ledger's fencing makes the duplicate harmless).", group=WORKERS),
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
RECKON_DEMO = setting("RECKON_DEMO", False, Bool, "Register the demo's actions (sandbox/demo_actions.py) against the sandboxes. `make run` sets it for its children; a deployment leaves it off.", group=ACTIONS)
RECKON_DEMO_ACTION_MODULE = "sandbox.demo_actions"
RECKON_ACTION_MODULES = setting("RECKON_ACTION_MODULES", [], List, "Comma-separated Python modules imported at start-up that register your actions.", group=ACTIONS, example="myapp.actions")
if RECKON_DEMO and RECKON_DEMO_ACTION_MODULE not in RECKON_ACTION_MODULES:
    RECKON_ACTION_MODULES.append(RECKON_DEMO_ACTION_MODULE)
# The actions file (TOML; ledger/declarations.py): read when it exists; when the variable is set,
# it must exist.
_ACTIONS_FILE = setting("RECKON_ACTIONS_FILE", "", Str, "Your declared actions (TOML). Unset: actions.toml in the project "
                        "folder (the checkout; installed from the package: the working directory), read when it "
                        "exists; set: the file must exist.", group=ACTIONS,
                        shown_default="actions.toml", example="actions.toml")
RECKON_ACTIONS_FILE_REQUIRED = bool(_ACTIONS_FILE)
RECKON_ACTIONS_FILE = Path(_ACTIONS_FILE or PROJECT_DIR / "actions.toml")
RECKON_WEBHOOK_HTTP_HOSTS = setting("RECKON_WEBHOOK_HTTP_HOSTS", [], List, "Comma-separated hosts a webhook reconciler or an MCP upstream may be asked over plain http:// (not encrypted: the job's payload and the upstream's headers travel in clear). Loopback (127.0.0.0/8, ::1, localhost) needs no entry; any other http:// webhook_url or upstream url stops start-up.", group=ACTIONS, example="reconciler.internal")
# The MCP gateway (gateway/): `make run` starts `mcp_gateway` on this URL's host and port.
RECKON_MCP_GATEWAY_URL = setting("RECKON_MCP_GATEWAY_URL", "http://127.0.0.1:8300/mcp", Url, "Where `make run` serves the MCP gateway (agents' tool calls to the MCP upstreams the actions file declares).", group=ACTIONS)
# A journaled call's lease is short and renewed while the upstream runs the call, whatever the
# tool's timeout: a gateway that dies mid-call leaves a lease that runs out within this many seconds.
RECKON_MCP_GATEWAY_LEASE_S = setting("RECKON_MCP_GATEWAY_LEASE_S", 5.0, Float, "The lease (s) of a tool call the MCP gateway journals, renewed every third of it while the upstream runs the call: after a gateway dies mid-call, the same call is answered \"in progress\" at most this long, then \"outcome unknown\".", group=ACTIONS)
# What one worker token may ask of the gateway: the worker API's size limit for a call's arguments
# (refused before the ledger is touched), and a rate of tools/call in each gateway process.
RECKON_MCP_GATEWAY_MAX_ARGUMENTS_BYTES = setting("RECKON_MCP_GATEWAY_MAX_ARGUMENTS_BYTES", 256 * 1024, Int, "The largest arguments of a tool call through the MCP gateway (bytes of JSON; the worker API's default body limit). Larger: refused with an error result, nothing stored nor called.", group=ACTIONS)
RECKON_MCP_GATEWAY_CALLS_PER_MINUTE = setting("RECKON_MCP_GATEWAY_CALLS_PER_MINUTE", 600, Int, "Tool calls a worker token may make through one MCP gateway process per minute (a burst of that many, then that pace; 0: no limit). Beyond it a call is refused at once with an error result saying when to call again, nothing stored nor called.", group=ACTIONS)

# How often the lease sweeper loop runs (django-q2's scheduler cannot go below one minute).
RECKON_SWEEP_INTERVAL = setting("RECKON_SWEEP_INTERVAL", 5.0, Float, "Seconds between passes of `sweep_leases --loop` (expired leases). Lower it for faster recovery after a crash.", group=WORKERS)
# The providers the demo actions call (the sandbox by default; any service with its contract).
RECKON_SANDBOX_URL = setting("RECKON_SANDBOX_URL", "http://127.0.0.1:8765", Url, "The sandbox provider: `make run` serves it on this URL's host and port, and the four provider URLs below default to it. Change it when 8765 is taken.", group=PROVIDERS)
RECKON_BILLING_URL = setting("RECKON_BILLING_URL", RECKON_SANDBOX_URL, Url, "The billing provider `billing.create_invoice` calls.", group=PROVIDERS, shown_default="RECKON_SANDBOX_URL")
RECKON_MAIL_URL = setting("RECKON_MAIL_URL", RECKON_SANDBOX_URL, Url, "The mail relay `mail.send` calls.", group=PROVIDERS, shown_default="RECKON_SANDBOX_URL")
RECKON_PUBLISH_URL = setting("RECKON_PUBLISH_URL", RECKON_SANDBOX_URL, Url, "The publish target `social.publish_post` calls.", group=PROVIDERS, shown_default="RECKON_SANDBOX_URL")
RECKON_VAULT_URL = setting("RECKON_VAULT_URL", RECKON_SANDBOX_URL, Url, "The vault `vault.rotate_credential` calls.", group=PROVIDERS, shown_default="RECKON_SANDBOX_URL")
RECKON_PROVIDER_TIMEOUT = setting("RECKON_PROVIDER_TIMEOUT", 10.0, Float, "Seconds a demo action waits for a provider (a timeout is unknown, never failed).", group=PROVIDERS)
# Each provider's budget in each process (ledger/budget.py).
RECKON_PROVIDER_CIRCUIT_FAILURES = setting("RECKON_PROVIDER_CIRCUIT_FAILURES", 5, Int, "Consecutive failures (refused, no answer, 5xx) that open a provider's circuit: its calls stop for a cool-down instead of failing one by one.", group=PROVIDERS)
RECKON_PROVIDER_CIRCUIT_COOLDOWN_S = setting("RECKON_PROVIDER_CIRCUIT_COOLDOWN_S", 10.0, Float, "Seconds an open circuit stays open before one probe call is let through.", group=PROVIDERS)
RECKON_PROVIDER_MAX_WAIT_S = setting("RECKON_PROVIDER_MAX_WAIT_S", 2.0, Float, "The longest a call waits for its provider's turn when rate limited; beyond it the call is not sent and is tried later.", group=PROVIDERS)
RECKON_PROVIDER_RECOVER_S = setting("RECKON_PROVIDER_RECOVER_S", 30.0, Float, "After a 429, seconds without another until a provider's pace is back to twice the refused rate.", group=PROVIDERS)
RECKON_PROVIDER_LIMITS = setting("RECKON_PROVIDER_LIMITS", {}, Rates, "Known provider limits, requests/s for each process (`billing=50,mail=25`: a provider's limit divided by the processes calling it). Unset: learnt from 429 answers.", group=PROVIDERS, example="billing=50,mail=25")
# The SMTP server `smtp.send_mail` sends through, and the API that finds a sent message by its
# Message-ID (the SMTP sandbox by default; SMTP itself has no read path).
RECKON_SMTP_HOST = setting("RECKON_SMTP_HOST", "127.0.0.1", Str, "The SMTP server `smtp.send_mail` sends through (`make run` serves the SMTP sandbox there).", group=PROVIDERS)
RECKON_SMTP_PORT = setting("RECKON_SMTP_PORT", 8025, Int, "Its port (the SMTP sandbox's under `make run`). Change it when 8025 is taken.", group=PROVIDERS)
RECKON_SMTP_LOOKUP_URL = setting("RECKON_SMTP_LOOKUP_URL", "http://127.0.0.1:8026", Url, "The archive API that finds a sent message by Message-ID (the SMTP sandbox serves it on this port under `make run`).", group=PROVIDERS)
RECKON_SMTP_FROM = setting("RECKON_SMTP_FROM", "reckon@localhost", Str, "The sender address of mail over SMTP.", group=PROVIDERS)
RECKON_DEMO_LEASE_TTL = setting("RECKON_DEMO_LEASE_TTL", 30.0, Float, "Lease length (s) of the demo's actions; the failure-injection harness shortens it so recovery takes seconds.", group=PROVIDERS)
# The dead-man gate: irreversible side effects wait while the sweeper or the reconciler has not
# completed a pass within this many seconds (0 disables the gate).
RECKON_GATE_BOUND_S = setting("RECKON_GATE_BOUND_S", 120.0, Float, "The dead-man gate: irreversible side effects wait while the sweeper or the reconciler has not completed a pass within this many seconds (0 disables the gate).", group=WORKERS)
# Queued work unclaimed this long is dispatched again by the sweeper (its delivery was lost).
RECKON_REDISPATCH_AFTER_S = setting("RECKON_REDISPATCH_AFTER_S", 120.0, Float, "Queued work unclaimed this many seconds is dispatched again by the sweeper (its delivery was lost).", group=WORKERS)
# Dispatch run_job to django-q2 when a job is enqueued or reopened.
RECKON_DISPATCH = setting("RECKON_DISPATCH", True, Bool, "Queue an in-process job to django-q2 when it is enqueued or reopened. Off only in measurements that run the worker loop themselves.", group=WORKERS)

# Reconciliation and approvals. A lookup that says nothing definite is retried after
# base * 2**(n-1) seconds (capped, with jitter); after MAX_CHECKS such looks a human decides.
RECKON_RECONCILE_BACKOFF_BASE = setting("RECKON_RECONCILE_BACKOFF_BASE", 2.0, Float, "Seconds before asking a provider again after a lookup that said nothing definite; doubles each time.", group=RECONCILIATION)
RECKON_RECONCILE_BACKOFF_CAP = setting("RECKON_RECONCILE_BACKOFF_CAP", 300.0, Float, "The longest back-off between two lookups of one job (s).", group=RECONCILIATION)
RECKON_RECONCILE_MAX_CHECKS = setting("RECKON_RECONCILE_MAX_CHECKS", 8, Int, "Inconclusive lookups after which a person decides (`needs_operator`).", group=RECONCILIATION)
RECKON_RECONCILE_BATCH = setting("RECKON_RECONCILE_BATCH", 100, Int, "Jobs a reconciliation pass claims at once.", group=RECONCILIATION)
# Provider lookups a reconciliation pass runs at once.
RECKON_RECONCILE_CONCURRENCY = setting("RECKON_RECONCILE_CONCURRENCY", 4, Int, "Provider lookups a reconciler runs at once. Raise it for a slow provider that takes parallel lookups.", group=RECONCILIATION)
# A claimed job is not due again for this long: longer than the slowest lookup (two calls).
RECKON_RECONCILE_CLAIM_TTL = setting("RECKON_RECONCILE_CLAIM_TTL", 60.0, Float, "A job a reconciler claimed is not due again for this many seconds: keep it longer than the slowest lookup.", group=RECONCILIATION)
RECKON_RECONCILE_INTERVAL = setting("RECKON_RECONCILE_INTERVAL", 2.0, Float, "Seconds between passes of `reconcile --loop`.", group=RECONCILIATION)
RECKON_APPROVAL_TTL_HOURS = setting("RECKON_APPROVAL_TTL_HOURS", 24.0, Float, "Hours an approval request for an irreversible replay stays open before it expires and the job goes back to an operator.", group=RECONCILIATION)
RECKON_HOLD_MAX_HOURS = setting("RECKON_HOLD_MAX_HOURS", 10.0, Float, "Hours an \"I'm on it\" hold lasts: an older one ends by itself (a shift that ended without signing out). A hold also ends when its holder signs out. 0: only then.", group=RECONCILIATION)
RECKON_RECOVERY_WINDOW_MINUTES = setting("RECKON_RECOVERY_WINDOW_MINUTES", 30, Int, "`recover` after a restore: how far back (minutes) work is held for a lookup.", group=RECONCILIATION)
RECKON_RECOVERY_LOOKUP_HOURS = setting("RECKON_RECOVERY_LOOKUP_HOURS", 24.0, Float, "How long (hours) a recovery window lasts, opened when the ledger is found to have lost history or by `recover`: every job created in it is looked up at its provider before its first side effect (not queryable: it waits for a person). Long enough to cover the agents' retries; `recover --end-window` ends it early.", group=RECONCILIATION)
RECKON_LEDGER_WATCH = setting("RECKON_LEDGER_WATCH", True, Bool, "Every process remembers, in a file under RECKON_LEDGER_WATCH_DIR, the database's system identifier, timeline and the newest ledger event it saw committed, and compares them on each new connection and every RECKON_LEDGER_WATCH_INTERVAL_S: a ledger that went back in time (a restore, a failover that lost its tail) enters recovery by itself. Off only for test harnesses that empty the database on purpose.", group=RECONCILIATION)
RECKON_LEDGER_WATCH_DIR = setting("RECKON_LEDGER_WATCH_DIR", str(PROJECT_DIR / ".reckon-watch"), Str, "The folder of the ledger watch's state files, shared by the Reckon processes of one host (it must outlive a restart of them, and a restore of the database; never on the database's own volume).", group=RECONCILIATION, shown_default="PROJECT_DIR/.reckon-watch", example="/var/lib/reckon/watch")
RECKON_LEDGER_WATCH_INTERVAL_S = setting("RECKON_LEDGER_WATCH_INTERVAL_S", 1.0, Float, "Seconds between two looks of one process's ledger watch (besides the look at each new connection), and so at most how often it writes its state file.", group=RECONCILIATION)
RECKON_LEDGER_WATCH_JOBS = setting("RECKON_LEDGER_WATCH_JOBS", 10000, Int, "How many recently touched jobs the ledger watch remembers (with the newest event it saw of each): those that are in the lost window are held on detection. When the lost window reaches beyond them, every unfinished job is held, as `recover` does.", group=RECONCILIATION)

# -- Hardening: cookies, headers, limits, login throttling, the worker API and /metrics ---------

# Secure transport settings switch on with RECKON_DEBUG=false, so that
# `manage.py check --deploy --fail-level WARNING` is clean in production; each is overridable.
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SECURE = setting("RECKON_SESSION_COOKIE_SECURE", not DEBUG, Bool, "Session cookie over HTTPS only.", group=SECURITY, shown_default="true with debug off")
CSRF_COOKIE_SECURE = setting("RECKON_CSRF_COOKIE_SECURE", not DEBUG, Bool, "CSRF cookie over HTTPS only.", group=SECURITY, shown_default="true with debug off")
SECURE_SSL_REDIRECT = setting("RECKON_SSL_REDIRECT", not DEBUG, Bool, "Redirect plain HTTP to HTTPS (not /healthz and /metrics). Turn it off only when something else redirects.", group=SECURITY, shown_default="true with debug off")
# Probes and Prometheus scrape over plain HTTP on the host itself.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^metrics$"]
SECURE_HSTS_SECONDS = setting("RECKON_HSTS_SECONDS", 0 if DEBUG else 31536000, Int, "Strict-Transport-Security max-age.", group=SECURITY, shown_default="31536000 with debug off, 0 with debug on")
SECURE_HSTS_INCLUDE_SUBDOMAINS = setting("RECKON_HSTS_INCLUDE_SUBDOMAINS", True, Bool, "HSTS includeSubDomains. Turn off when a subdomain still serves plain HTTP.", group=SECURITY)
SECURE_HSTS_PRELOAD = setting("RECKON_HSTS_PRELOAD", True, Bool, "HSTS preload.", group=SECURITY)
if setting("RECKON_BEHIND_TLS_PROXY", False, Bool, "A proxy in front terminates TLS and sets X-Forwarded-Proto: trust it for the scheme.", group=SECURITY):
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
DATA_UPLOAD_MAX_MEMORY_SIZE = setting("RECKON_MAX_REQUEST_BYTES", 1024 * 1024, Int, "The largest request body the console accepts (bytes).", group=SECURITY)
RECKON_API_MAX_BODY_BYTES = setting("RECKON_API_MAX_BODY_BYTES", 256 * 1024, Int, "The largest worker API request body (bytes; larger: 413).", group=API)
# Workers waiting for work (POST /api/v1/claims with wait_seconds): a waiting claim holds no
# database connection, but it occupies one server thread for its wait, so each web process holds
# at most RECKON_CLAIM_WAITS of them (keep it below gunicorn's --threads, leaving threads for the
# console and the lease writes); beyond that, and under a single-threaded server, a claim answers
# at once (204, Retry-After). A waiting claim is woken by a NOTIFY when work arrives, and looks
# again every RECKON_CLAIM_POLL_S seconds in case a wake-up was lost.
RECKON_CLAIM_WAITS = setting("RECKON_CLAIM_WAITS", 2, Int, "Waiting claims (`POST /api/v1/claims` with wait_seconds) each web process holds; keep it below gunicorn's --threads.", group=API)
RECKON_CLAIM_POLL_S = setting("RECKON_CLAIM_POLL_S", 5.0, Float, "A waiting claim looks again this often (s), in case a wake-up was lost.", group=API)
# The reverse proxies / load balancers in front of the web processes (addresses or networks).
# When the direct peer is one of them, the client address is taken from X-Forwarded-For (the
# rightmost hop that is not itself a trusted proxy); from any other peer X-Forwarded-For is
# ignored. The login throttle and the /metrics allow-list key on that address
# (console.hardening.client_address). Empty: the direct peer is the client.
RECKON_TRUSTED_PROXIES = setting("RECKON_TRUSTED_PROXIES", [], Networks, "The proxies / load balancers in front (addresses or networks); X-Forwarded-For is read only from them. Set it behind a proxy, or every client shares the proxy's address.", group=SECURITY, example="10.0.0.0/8")
# Login throttling (django-axes, on /accounts/login/ and /admin/login/ alike). Failures count per
# (username, client address) pair, the username normalised as Django does (NFKC) and case-folded;
# LIMIT failures lock that pair until WINDOW seconds pass without another try, and a success
# clears its count. Another address or another username is not held up, so nobody can lock a
# colleague out from elsewhere (the per-account slow-down below only slows addresses the account
# has not logged in from). Attempts are rows in PostgreSQL: the limit holds across web
# processes and hosts.
RECKON_LOGIN_FAILURE_LIMIT = setting("RECKON_LOGIN_FAILURE_LIMIT", 5, Int, "Failed log-ins per username and client address before that pair is locked out.", group=SECURITY)
RECKON_LOGIN_FAILURE_WINDOW = setting("RECKON_LOGIN_FAILURE_WINDOW", 15 * 60, Int, "Seconds without another try until a lock-out lifts.", group=SECURITY)
# Per account (console.hardening.account_wait): many addresses, each below the limit above, could
# still guess on. Once a username has ACCOUNT_LIMIT failures in the window from anywhere, an
# attempt from an address it has not logged in from (in 90 days) waits 2, 4, 8 … seconds after
# the latest failure, at most ACCOUNT_MAX_WAIT; its usual addresses are never slowed.
RECKON_LOGIN_ACCOUNT_LIMIT = setting("RECKON_LOGIN_ACCOUNT_LIMIT", 10, Int, "Failed log-ins for one username, from any address, before attempts from addresses it has not logged in from are slowed down.", group=SECURITY)
RECKON_LOGIN_ACCOUNT_MAX_WAIT = setting("RECKON_LOGIN_ACCOUNT_MAX_WAIT", 60, Int, "The longest wait (s) the per-account slow-down imposes between attempts.", group=SECURITY)
AXES_HANDLER = "console.hardening.LoginThrottle"
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_FAILURE_LIMIT = RECKON_LOGIN_FAILURE_LIMIT
AXES_COOLOFF_TIME = timedelta(seconds=RECKON_LOGIN_FAILURE_WINDOW)
AXES_USERNAME_CALLABLE = "console.hardening.login_username"
AXES_CLIENT_IP_CALLABLE = "console.hardening.client_address"
AXES_LOCKOUT_CALLABLE = "console.hardening.locked_out"
AXES_RESET_ON_SUCCESS = True
# /metrics: with RECKON_DEBUG=false it needs this bearer token *and* an allowed client address
# (without a token it answers 403 saying so); in debug, either one opens it.
RECKON_METRICS_TOKEN = setting("RECKON_METRICS_TOKEN", "", Str, "Bearer token for /metrics; required with debug off (without it /metrics answers 403).", group=SECURITY, example="long-random-string", secret=True)
RECKON_METRICS_ALLOW = setting("RECKON_METRICS_ALLOW", ["127.0.0.1/32", "::1/128"], Networks, "Client addresses or networks that may read /metrics.", group=SECURITY, shown_default="127.0.0.1,::1")
# -- Sign-in through identity providers (sso/, README "Sign in with your identity provider") -------
# Unset: no provider, password sign-in as before. Each provider is `id=issuer URL` (discovery at
# ISSUER/.well-known/openid-configuration, PKCE on), with its client id and secret under the same id.
RECKON_OIDC_PROVIDERS = setting("RECKON_OIDC_PROVIDERS", {}, Pairs, "Identity providers (OpenID Connect), `id=issuer URL` separated by commas. Unset: password sign-in only.", group=SIGN_IN, example="keycloak=https://sso.example.com/realms/acme")
RECKON_OIDC_NAMES = setting("RECKON_OIDC_NAMES", {}, Pairs, "The name the sign-in page shows for each provider, `id=name` (default: the id).", group=SIGN_IN, example="keycloak=Acme SSO")
RECKON_OIDC_CLIENT_IDS = setting("RECKON_OIDC_CLIENT_IDS", {}, Pairs, "Reckon's client id at each provider, `id=client id`.", group=SIGN_IN, example="keycloak=reckon")
RECKON_OIDC_CLIENT_SECRETS = setting("RECKON_OIDC_CLIENT_SECRETS", {}, Pairs, "Reckon's client secret at each provider, `id=secret`.", group=SIGN_IN, example="keycloak=change-me", secret=True)
RECKON_OIDC_SCOPES = setting("RECKON_OIDC_SCOPES", ["openid", "profile", "email"], List, "Scopes asked of every provider; add the one that releases the groups claim if your provider needs it (e.g. groups).", group=SIGN_IN)
RECKON_OIDC_GROUPS_CLAIM = setting("RECKON_OIDC_GROUPS_CLAIM", "groups", Str, "The claim (in the ID token or userinfo) that lists the person's groups at the provider.", group=SIGN_IN)
RECKON_OIDC_GROUP_ROLES = setting("RECKON_OIDC_GROUP_ROLES", {}, Sets, "Provider group to Reckon roles, `group=role|role` separated by commas (roles: operators, approvers, auditors). Applied at every sign-in: a role no mapped group gives is taken away.", group=SIGN_IN, example="reckon-operators=operators,reckon-approvers=approvers,reckon-auditors=auditors")
RECKON_OIDC_GROUP_TENANTS = setting("RECKON_OIDC_GROUP_TENANTS", {}, Sets, "Provider group to tenant scope, `group=tenant|tenant` (`*`: every tenant) separated by commas. Applied at every sign-in.", group=SIGN_IN, example="reckon-operators=acme|globex,reckon-auditors=*")
RECKON_OIDC_REVALIDATE_S = setting("RECKON_OIDC_REVALIDATE_S", 900, Int, "A session signed in through a provider is sent back to it after this many seconds, and its roles and tenants are read again: how long a role taken away at the provider can outlive it.", group=SIGN_IN)
RECKON_SSO_ONLY = setting("RECKON_SSO_ONLY", False, Bool, "Password sign-in off for everyone but the break-glass accounts (which then need their TOTP code). Needs a provider.", group=SIGN_IN)
RECKON_BREAK_GLASS_ACCOUNTS = setting("RECKON_BREAK_GLASS_ACCOUNTS", [], List, "Usernames that may still sign in with a password when RECKON_SSO_ONLY is on, with a TOTP code (`manage.py break_glass_totp USERNAME`).", group=SIGN_IN, example="breakglass")
RECKON_PASSWORD_SESSION_S = setting("RECKON_PASSWORD_SESSION_S", 8 * 3600, Int, "A session signed in with a password ends after this many seconds (sign in again). A password session ends at once when RECKON_SSO_ONLY applies to its account.", group=SIGN_IN)
RECKON_BREAK_GLASS_SESSION_S = setting("RECKON_BREAK_GLASS_SESSION_S", 3600, Int, "A break-glass session (password and TOTP code, with RECKON_SSO_ONLY) ends after this many seconds.", group=SIGN_IN)
RECKON_NO_ROLE_CONTACT = setting("RECKON_NO_ROLE_CONTACT", "your Reckon administrator", Str, "Who a person signed in without any role is told to ask (\"You have no role here; ask …\").", group=SIGN_IN)
_ROLES = {"operators", "approvers", "auditors"}
for _group, _roles in RECKON_OIDC_GROUP_ROLES.items():
    if _roles - _ROLES:
        raise ImproperlyConfigured(f"RECKON_OIDC_GROUP_ROLES maps {_group} to {', '.join(sorted(_roles - _ROLES))}: "
                                   f"Reckon's roles are {', '.join(sorted(_ROLES))}")
for _provider in RECKON_OIDC_PROVIDERS:
    _missing = [name for name, values in (("RECKON_OIDC_CLIENT_IDS", RECKON_OIDC_CLIENT_IDS),
                                          ("RECKON_OIDC_CLIENT_SECRETS", RECKON_OIDC_CLIENT_SECRETS)) if _provider not in values]
    if _missing:
        raise ImproperlyConfigured(f"identity provider {_provider} (RECKON_OIDC_PROVIDERS) has no entry in {' and '.join(_missing)}")
if RECKON_SSO_ONLY and not RECKON_OIDC_PROVIDERS:
    raise ImproperlyConfigured("RECKON_SSO_ONLY is on but RECKON_OIDC_PROVIDERS names no identity provider: nobody could sign in")


def oidc_apps(providers: dict, names: dict, client_ids: dict, secrets: dict) -> list[dict]:
    """django-allauth's OpenID Connect apps for Reckon's provider settings."""
    return [
        {"provider_id": provider, "name": names.get(provider, provider), "client_id": client_ids[provider],
         "secret": secrets[provider],
         "settings": {"server_url": issuer, "oauth_pkce_enabled": True, "fetch_userinfo": True}}
        for provider, issuer in providers.items()
    ]


SOCIALACCOUNT_PROVIDERS = {
    "openid_connect": {
        "OAUTH_PKCE_ENABLED": True,
        "SCOPE": RECKON_OIDC_SCOPES,
        "APPS": oidc_apps(RECKON_OIDC_PROVIDERS, RECKON_OIDC_NAMES, RECKON_OIDC_CLIENT_IDS, RECKON_OIDC_CLIENT_SECRETS),
    }
}
SOCIALACCOUNT_ADAPTER = "sso.adapters.ProviderSignIn"
ACCOUNT_ADAPTER = "sso.adapters.NoSignUp"
# A new person is created at their first sign-in, from the provider's claims; an account is never
# joined to a provider identity by a matching e-mail address (the provider does not own our users).
SOCIALACCOUNT_AUTO_SIGNUP = True
SOCIALACCOUNT_EMAIL_AUTHENTICATION = False
SOCIALACCOUNT_EMAIL_AUTHENTICATION_AUTO_CONNECT = False
SOCIALACCOUNT_QUERY_EMAIL = False
SOCIALACCOUNT_STORE_TOKENS = False
ACCOUNT_LOGIN_METHODS = {"username"}
ACCOUNT_SIGNUP_FIELDS = ["username*"]
ACCOUNT_EMAIL_VERIFICATION = "none"
ACCOUNT_LOGOUT_REDIRECT_URL = LOGOUT_REDIRECT_URL
MFA_SUPPORTED_TYPES = ["totp"]
MFA_ADAPTER = "sso.secrets.EncryptedSecrets"  # TOTP secrets are stored encrypted under a key from SECRET_KEY
MFA_TOTP_ISSUER = "Reckon"
# -- end of hardening ----------------------------------------------------------------------------

RECKON_LOG_LEVEL = setting("RECKON_LOG_LEVEL", "INFO", Str, "Level of Reckon's own log (DEBUG, INFO, WARNING, …).",
                           group=CORE)

# -- Alerts (alerts/): where they go and when they fire.
RECKON_ALERT_WEBHOOK_URL = setting("RECKON_ALERT_WEBHOOK_URL", "", Url, "A Slack-compatible webhook (a JSON POST of {\"text\": ...}) that receives alerts; unset: no webhook.", group=ALERTS, example="https://hooks.slack.com/services/T000/B000/XXXX")
RECKON_ALERT_EMAILS = setting("RECKON_ALERT_EMAILS", [], List, "Comma-separated addresses that receive alerts by email (Django's mail backend); unset: no email.", group=ALERTS, example="oncall@example.com")
RECKON_ALERT_EMAIL_FROM = setting("RECKON_ALERT_EMAIL_FROM", "reckon@localhost", Str, "The sender address of alert emails.", group=ALERTS)
RECKON_CONSOLE_URL = setting("RECKON_CONSOLE_URL", "", Url, "The console's address as people reach it, for the links alerts carry (unset: paths only).", group=ALERTS, example="https://reckon.example.com")
RECKON_ALERT_UNKNOWN_AGE_S = setting("RECKON_ALERT_UNKNOWN_AGE_S", 300.0, Float, "Alert when the oldest unknown job is older than this many seconds (from its creation): a provider fault pages within minutes.", group=ALERTS)
RECKON_ALERT_APPROVAL_WAIT_S = setting("RECKON_ALERT_APPROVAL_WAIT_S", 900.0, Float, "Alert when an approval request has waited longer than this many seconds.", group=ALERTS)
RECKON_ALERT_LOOP_STALL_S = setting("RECKON_ALERT_LOOP_STALL_S", 60.0, Float, "Alert when a running `reconcile --loop` or `sweep_leases --loop` process has not completed a pass for this many seconds (a stopped or stuck process; the qcluster's once-a-minute passes do not hide it).", group=ALERTS)
RECKON_WATCHDOG_INTERVAL = setting("RECKON_WATCHDOG_INTERVAL", 15.0, Float, "Seconds between passes of `watchdog --loop`, the process that evaluates the alert conditions (a process of its own: it still runs when the qcluster, sweeper and reconciler stop).", group=ALERTS)
RECKON_ALERT_SILENCE_MAX_H = setting("RECKON_ALERT_SILENCE_MAX_H", 24.0, Float, "The longest an operator may silence an alert on the console's alerts page (hours).", group=ALERTS)
EMAIL_HOST = setting("RECKON_EMAIL_HOST", "localhost", Str, "The SMTP server Django's mail backend sends alert emails through.", group=ALERTS)
# The event history's partitions, retention and archives (ledger/partitions.py, ledger/retention.py).
RECKON_HISTORY_PARTITION_DAYS = setting("RECKON_HISTORY_PARTITION_DAYS", 28, Int, "Days of events per partition of the history (the unit retention moves out). Each event written looks up its job's previous one in every online partition: fewer, longer partitions keep that short. Changing it affects partitions made afterwards only.", group=HISTORY)
RECKON_HISTORY_PARTITIONS_AHEAD = setting("RECKON_HISTORY_PARTITIONS_AHEAD", 2, Int, "Partitions kept created ahead of now (after every migrate and by the `partitions` schedule): events cannot be written past the last one.", group=HISTORY)
RECKON_HISTORY_RETENTION_DAYS = setting("RECKON_HISTORY_RETENTION_DAYS", 365.0, Float, "Days a partition of the history stays online after it ends; then `archive_history` writes it to an archive file and drops it (only when every job in it is finished). 0: never archive.", group=HISTORY)
RECKON_HISTORY_RETENTION_BY_TENANT = setting("RECKON_HISTORY_RETENTION_BY_TENANT", {}, Rates, "Days of retention for particular tenants (`acme=730,trial=30`). Partitions are shared by tenants, so a partition leaves when every tenant in it is past its own retention: a longer retention holds the whole partition.", group=HISTORY, example="acme=730,trial=30")
RECKON_HISTORY_ARCHIVE_WORK_SHARE = setting("RECKON_HISTORY_ARCHIVE_WORK_SHARE", 0.25, Share, "The share of its time a retention pass works: after each stretch of work it rests, so that the ledger's own work keeps the rest of the machine (0.25: a pass takes four times as long as unpaced). 1: never rest.", group=HISTORY)
_HISTORY_ARCHIVE_DIR = setting("RECKON_HISTORY_ARCHIVE_DIR", "", Str, "Where `archive_history` writes archive files. Unset: the folder `history-archive` in the project folder.", group=HISTORY, example="/var/lib/reckon/archive")
RECKON_HISTORY_ARCHIVE_DIR = Path(_HISTORY_ARCHIVE_DIR or PROJECT_DIR / "history-archive")
EMAIL_PORT = setting("RECKON_EMAIL_PORT", 25, Int, "Its port.", group=ALERTS)
# An evaluation holds its alert row locked while it sends; with the webhook's 5 s, four conditions
# stay inside the cluster's task timeout even when both channels hang.
EMAIL_TIMEOUT = 5
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {
        "reckon": {"handlers": ["console"], "level": RECKON_LOG_LEVEL},
        # Every 500 with its traceback, on stderr, whatever the debug setting: Django's own console
        # handler is silent with debug off, and its mail to ADMINS goes nowhere without them.
        "django.request": {"handlers": ["console"], "level": "ERROR", "propagate": False},
    },
}

# Read outside this module (by programs that may run without the settings), declared here so that
# the reference lists them and the test can hold every read to a declaration.
declare("RECKON_PG_BINDIR", "", "The folder holding initdb and pg_ctl when they are neither on PATH nor under "
        "/usr/lib/postgresql/<version>/bin (config/localdb.py).", group=EMBEDDED)
declare("RECKON_PGDATA_DIR", ".pgdata", "Where the embedded cluster lives (as root, when `postgres` cannot enter the "
        "checkout: /var/tmp/reckon-pgdata-<hash>).", group=EMBEDDED)
declare("RECKON_PG_PORT", "", "The embedded cluster's port. Unset: one derived from its folder (20000–29999), so "
        "two checkouts do not collide.", group=EMBEDDED, shown_default="derived from the folder")
declare("RECKON_FAULT_POINT", "", "Arms a named fault point in a worker (ledger/faults.py): the worker stops itself "
        "there with SIGSTOP.", group=HARNESS, internal=True)
declare("RECKON_FAULT_JOBS", "", "Comma-separated job ids (a trailing * matches a prefix) the armed point fires for.",
        group=HARNESS, internal=True)
declare("RECKON_FAULT_DIR", "", "A folder of the run's own where fired fault points are recorded.", group=HARNESS,
        internal=True)
declare("RECKON_TEST_CHROMIUM", "/usr/bin/chromium-headless-shell", "The Chromium the browser tests drive "
        "(tests/browser/conftest.py); Debian's old headless shell unless set.", group=HARNESS, internal=True)
declare("RECKON_URL", "http://127.0.0.1:8000", "Reckon's address for the example workers and the docs' samples.",
        group=EXAMPLES)
declare("RECKON_API_TOKEN", "", "The worker token the example workers send (`manage.py worker_token create`).",
        group=EXAMPLES)
declare("RECKON_WEBHOOK_SECRET", "", "examples/webhook_receiver.py: the secret it verifies Reckon's signature with.",
        group=EXAMPLES)
declare("RECKON_WEBHOOK_SECRET_OLD", "", "examples/webhook_receiver.py: the previous secret, accepted during a "
        "rotation.", group=EXAMPLES)
declare("PROVIDER_URL", "http://127.0.0.1:8765", "examples/webhook_receiver.py: the provider it asks.", group=EXAMPLES)
declare("RECKON_TEST_LOGS", "", "Where the tests' server processes write their logs (tests/processes.py; unset: "
        "the system's /tmp).", group=HARNESS, internal=True)
declare("RECKON_OUTAGE_CALLS", "10", "Calls timed in each phase of tests/gateway/test_upstream_outage.py (300 for "
        "the figures in docs/performance-history.md's gateway section).", group=HARNESS, internal=True)
declare("RECKON_BENCH_WEBHOOK_SECRET", "", "The benchmark's webhook secret, named in its webhook action's "
        "webhook_secrets (bench/sections.py sets it).", group=HARNESS, internal=True)
declare("RECKON_BENCH_DATABASE", "", "examples/measure_*.py: the throwaway database they create.", group=HARNESS,
        internal=True)
# Reckon's own secrets (the declarations marked secret): the actions file may not hand them to an
# MCP upstream's headers or env (gateway/config.py).
RECKON_OWN_SECRETS = secret_names()
