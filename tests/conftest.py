"""Shared fixtures: personas, job factories, and helpers that move time for leases."""

from __future__ import annotations

import os
import shutil
import tempfile
import warnings
from datetime import UTC, datetime, timedelta
from pathlib import Path

# No sweeper or reconciler loop runs during most tests: the dead-man gate would hold every
# irreversible job. Worker processes started by tests inherit this; gate tests turn it on.
os.environ.setdefault("RECKON_GATE_BOUND_S", "0")

import pytest
from django.conf import settings
from django.contrib.auth.models import Group, User
from django.db import OperationalError, connection, connections, transaction
from django.test import TransactionTestCase
from django.test.testcases import QuietWSGIRequestHandler
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

from ledger import services
from ledger.models import Attempt, Job

# The suite shares a 2-core machine with the real processes it starts: an example that is slow to
# make or to run is load, not a finding. Tests that set their own Hypothesis settings keep them.
hypothesis_settings.register_profile("reckon", deadline=None, suppress_health_check=[HealthCheck.too_slow])
hypothesis_settings.load_profile("reckon")


# Unit tests drive the worker loop by hand (tests with real clusters turn dispatch back on), with
# no dead-man gate and a cheap password hash.
TEST_SETTINGS = {"RECKON_DISPATCH": False, "RECKON_GATE_BOUND_S": 0,
                 "PASSWORD_HASHERS": ["django.contrib.auth.hashers.MD5PasswordHasher"]}


@pytest.fixture(autouse=True)
def _test_settings(settings):
    for name, value in TEST_SETTINGS.items():
        setattr(settings, name, value)


@pytest.fixture(autouse=True)
def _fresh_provider_budgets():
    """Each test starts with no provider throttled and no circuit open (ledger.budget is per process)."""
    from ledger.budget import BUDGET

    BUDGET.forget()


def make_job(job_id: str = "job-1", *, action: str = "reckon.echo", tenant: str = "acme",
             payload: dict | None = None, identity: dict | None = None) -> Job:
    return services.enqueue_job(job_id=job_id, tenant=tenant, action=action,
                                payload=payload if payload is not None else {"n": 1}, identity=identity)


def expire_lease(job: Job | str) -> None:
    """Let the running attempt's lease run out, as if its worker had stalled past the TTL."""
    job_pk = job.pk if isinstance(job, Job) else Job.objects.get(job_id=job).pk
    with connection.cursor() as cursor:
        cursor.execute("UPDATE ledger_attempt SET lease_expires_at = clock_timestamp() - interval '1 second'"
                       " WHERE job_id = %s AND execution_state = 'running'", [job_pk])


def latest_attempt(job_id: str) -> Attempt:
    return Attempt.objects.filter(job__job_id=job_id).latest_per_job().first()


def event_kinds(job_id: str) -> list[str]:
    return list(Job.objects.get(job_id=job_id).events.order_by("id").values_list("kind", flat=True))


def _persona(username: str, group: str | None, **extra) -> User:
    user = User.objects.create_user(username=username, password="pw-" + username, **extra)
    if group:
        user.groups.add(Group.objects.get_or_create(name=group)[0])
    return user


def token_issuer() -> User:
    """The person who issues the tests' worker tokens (a token that can reach irreversible work has
    one behind it: api.tokens.worker_token_create); in no group, so she approves nothing."""
    return User.objects.get_or_create(username="tina")[0]


@pytest.fixture
def operator(db) -> User:
    return _persona("olga", "operators")


@pytest.fixture
def approver(db) -> User:
    return _persona("abe", "approvers")


@pytest.fixture
def auditor(db) -> User:
    return _persona("aud", "auditors")


@pytest.fixture
def admin_user(db) -> User:
    return _persona("root", None, is_staff=True, is_superuser=True)


@pytest.fixture(scope="session")
def sandbox_process():
    """One real sandbox provider process for the session (its own SQLite store)."""
    from sandbox.testing import SandboxProcess

    with SandboxProcess() as process:
        yield process


@pytest.fixture
def sandbox(sandbox_process):
    """The running sandbox provider, wiped clean (data, profiles, fault configuration)."""
    if sandbox_process.process is None or sandbox_process.process.poll() is not None:
        sandbox_process.start()  # a test killed it on purpose
    sandbox_process.reset()
    return sandbox_process


@pytest.fixture
def provider(sandbox, settings):
    """The sandbox, with every demo action's provider URL pointing at it."""
    for name in ("SANDBOX", "BILLING", "MAIL", "PUBLISH", "VAULT"):
        setattr(settings, f"RECKON_{name}_URL", sandbox.url)
    return sandbox


def sandbox_env(sandbox) -> dict:
    """Environment for a worker process that must call this sandbox."""
    return {f"RECKON_{name}_URL": sandbox.url for name in ("SANDBOX", "BILLING", "MAIL", "PUBLISH", "VAULT")}


@pytest.fixture(scope="session")
def smtp_sandbox_process():
    """One real SMTP sandbox process for the session (its own SQLite archive)."""
    from sandbox.smtp.testing import SmtpSandboxProcess

    with SmtpSandboxProcess() as process:
        yield process


@pytest.fixture
def smtp_sandbox(smtp_sandbox_process, settings):
    """The running SMTP sandbox, its archive empty and no fault set, with `smtp.send_mail` and its
    reconciler pointed at it."""
    if not smtp_sandbox_process.running():
        smtp_sandbox_process.start()  # a test stopped it on purpose
    smtp_sandbox_process.reset()
    for name, value in smtp_sandbox_process.settings.items():
        setattr(settings, name, value)
    return smtp_sandbox_process


# The suite's longest files, longest first (seconds a file took in `make test`, measured with
# `pytest --durations`; keep the list in that order when one is added or made cheaper). xdist
# hands files to its workers in the order collected (`make test` passes --no-loadscope-reorder:
# by default it puts the files with the most tests first, which started these last and left one
# worker running them alone at the end), so these start first and the short files fill in beside them.
LONGEST_FIRST = (
    "tests/bench/test_bench_quick.py",
    "tests/chaos/test_matrix.py",
    "tests/deploy/test_install.py",  # a fresh environment with the wheel installed
    "tests/ha/test_failover.py",  # a Patroni cluster, a failover under six processes (about 100 s)
    "tests/api/test_live.py",  # Schemathesis, three runs
    "tests/browser/test_accessibility.py",  # every page for four roles, busy and empty, under axe
    "tests/docs/test_pages.py",
    "tests/ledger/test_stateful.py",
)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    if missing := [path for path in LONGEST_FIRST if not (config.rootpath / path).is_file()]:
        raise pytest.UsageError(f"tests/conftest.py LONGEST_FIRST names files that are not there: {missing}")
    rank = {path: n for n, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.partition("::")[0], len(rank)))  # stable: the rest in order


# `make test-fast` (the edit-run loop) runs what is not slow. Slow, besides what a file marks so
# (real processes: qcluster, sandbox): the longest files above, and every test that commits, that
# is, runs against a live server or a transactional database (each pays a truncate afterwards and
# most start a process). The full suite, what CI runs, keeps them all.
COMMITTING_FIXTURES = {"live_server", "transactional_db", "django_db_serialized_rollback"}


def pytest_itemcollected(item):  # before `-m` selects (in collection_modifyitems)
    marker = item.get_closest_marker("django_db")
    if (item.nodeid.partition("::")[0] in LONGEST_FIRST or COMMITTING_FIXTURES & set(getattr(item, "fixturenames", ()))
            or (marker and marker.kwargs.get("transaction"))):
        item.add_marker(pytest.mark.slow)


# After a transactional test (transaction=True, live_server) Django flushes the database: one
# TRUNCATE of every table, then the post_migrate signal, which recreates the content types and
# permissions it has just removed, the schedules and the event partitions ahead. Measured, that
# was 2-3 s after each of the suite's ~200 such tests. The same clean slate, cheaper: truncate
# only the tables the test wrote to (one statement finds them), keep the content types and
# permissions (migrate made them and no test changes them; the flush would make the same rows
# again), and run Reckon's own post_migrate work (ledger/apps.py, config/apps.py): the schedules
# and the event partitions ahead. Test cases that declare available_apps or serialized_rollback
# flush as Django does.
KEPT_BY_THE_FLUSH = {"django_content_type", "auth_permission"}
_django_fixture_teardown = TransactionTestCase._fixture_teardown


def _truncate_what_the_test_wrote(self) -> None:
    if self.available_apps is not None or self.serialized_rollback:
        return _django_fixture_teardown(self)
    from config.schedules import sync_schedules
    for name in self._databases_names(include_mirrors=False):
        connection = connections[name]
        quote = connection.ops.quote_name
        tables = sorted(set(connection.introspection.django_table_names(only_existing=True, include_views=False))
                        - KEPT_BY_THE_FLUSH)
        with connection.cursor() as cursor:
            cursor.execute(" UNION ALL ".join(f"SELECT %s WHERE EXISTS (SELECT FROM {quote(table)})"
                                              for table in tables), tables)
            written = [row[0] for row in cursor.fetchall()]
            if written:
                truncate = f"TRUNCATE {', '.join(map(quote, written))} CASCADE"
                try:
                    with transaction.atomic(using=name):  # a flush that waits on a lock says on whose
                        cursor.execute(f"SET LOCAL lock_timeout = '{SLOW_TEARDOWN_S:g}s'")
                        cursor.execute(truncate)
                except OperationalError:
                    warnings.warn(f"the flush waited over {SLOW_TEARDOWN_S:g} s for a lock; sessions then: "
                                  f"{sessions_on_the_database(cursor)}", stacklevel=1)
                    cursor.execute(truncate)
        sync_schedules(name)  # also when a test deleted them: the table is then empty, not "written"
        if name == "default":
            partitions_around_now()


# A teardown that waits longer than this says what it waited for (a warning in the run's summary).
SLOW_TEARDOWN_S = 5.0


def sessions_on_the_database(cursor) -> list[tuple]:
    """Every other session on the test database: who, in what state, waiting on what, doing what,
    and for a Reckon process's session (application_name reckon:…:PID) that process's command line."""
    cursor.execute("SELECT pid, backend_type, application_name, state, wait_event_type, wait_event, "
                   "left(query, 100) FROM pg_stat_activity WHERE datname = current_database() "
                   "AND pid <> pg_backend_pid()")
    return [(*row, _command_line(row[2])) for row in cursor.fetchall()]


def _command_line(application_name: str | None) -> str:
    pid = (application_name or "").rpartition(":")[2]
    if not application_name or not application_name.startswith("reckon:") or not pid.isdigit():
        return ""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return cmdline.read().replace(b"\0", b" ").decode(errors="replace")[:200]
    except OSError:
        return "(gone)"


def partitions_around_now() -> None:
    """The event partitions ahead, as post_migrate makes them, and one back: tests date events up
    to hours before now, and a new database's first partition starts at today's midnight (UTC), as
    does one a retention test makes again after archiving the periods around now."""
    from ledger.partitions import ensure, ensure_ahead

    now = datetime.now(UTC)
    ensure(now - timedelta(days=settings.RECKON_HISTORY_PARTITION_DAYS), now)
    ensure_ahead(now)


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    with django_db_blocker.unblock():
        partitions_around_now()


TransactionTestCase._fixture_teardown = _truncate_what_the_test_wrote


# The live server (pytest-django's live_server: Django's WSGI server in a thread) writes an answer's
# headers and its body in two sends; with Nagle's algorithm on the connection, the body waited for
# the client's delayed ACK of the headers: 40 ms on most requests. Schemathesis's 553 requests
# averaged 46 ms. TCP_NODELAY on the live server's connections, as gunicorn sets on its own.
QuietWSGIRequestHandler.disable_nagle_algorithm = True


@pytest.fixture
def scratch_folder():
    """A folder of the test's own that the `postgres` user can reach when we are root (pytest's
    tmp_path is 0700): for a PostgreSQL cluster the test, or a process it starts, makes there."""
    folder = Path(tempfile.mkdtemp(prefix="reckon-test-"))
    os.chmod(folder, 0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)
