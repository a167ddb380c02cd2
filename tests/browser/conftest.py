"""Playwright against Debian's Chromium and a live Django server on the test database."""

from __future__ import annotations

import os
import tempfile
import time
import warnings
from pathlib import Path

import pytest
from django.db import connection

from tests.conftest import SLOW_TEARDOWN_S, sessions_on_the_database
from tests.console.conftest import with_tenants
from tests.processes import wait_for

# live_server runs Django in a thread of this process while Playwright's sync API holds an event
# loop here; Django's async-safety check would refuse the ORM calls the tests make in between.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
_xdg = tempfile.mkdtemp(prefix="reckon-chromium-")
os.environ.setdefault("XDG_CONFIG_HOME", _xdg)
os.environ.setdefault("XDG_CACHE_HOME", _xdg)

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


# Chromium's old headless shell (Debian's chromium-headless-shell, the same version as its
# chromium package): the browser tests took 17 % less time and 19 % less CPU with it than with the
# full browser in its new headless mode (tests/browser on two workers: 220 s and 405 CPU-s against
# 266 s and 499 CPU-s), most of it the renderer's. RECKON_TEST_CHROMIUM names another build.
CHROMIUM = os.environ.get("RECKON_TEST_CHROMIUM", "/usr/bin/chromium-headless-shell")


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    if not os.access(CHROMIUM, os.X_OK):
        raise pytest.UsageError(f"the browser tests run Chromium's headless shell, {CHROMIUM}, which is not there: "
                                "on Debian `apt-get install chromium-headless-shell` (.ci/run installs it), or "
                                "set RECKON_TEST_CHROMIUM to another Chromium")
    return {
        **browser_type_launch_args,
        "executable_path": CHROMIUM,
        "args": [
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
        ],
    }


# The personas at work in the browser see every tenant (the fence is tested in tests/console).
@pytest.fixture
def operator(operator):
    return with_tenants(operator)


@pytest.fixture
def approver(approver):
    return with_tenants(approver)


@pytest.fixture
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


def _other_sessions() -> int:
    """Sessions of other processes (a cluster's workers) still on the test database. Only clients':
    an autovacuum worker on the database (which gives way to the flush's locks) is not waited for,
    nor this process's own sessions: its live server's threads (reckon:PID) and the claims listener
    a waiting claim started here (reckon:claims-listener:PID, idle on LISTEN, holding no lock; the
    fresh-clone runs waited 32-40 s for it to close)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
            " AND application_name <> %s AND application_name NOT LIKE %s",
            [f"reckon:{os.getpid()}", f"reckon:%:{os.getpid()}"],
        )
        return cursor.fetchone()[0]


@pytest.fixture
def log_in(live_server):
    """Log a persona in through the real login form, in a fresh browser context."""
    contexts = []

    def log_in(browser, user, password: str | None = None):
        context = browser.new_context(viewport={"width": 1400, "height": 900})
        contexts.append(context)
        page = context.new_page()
        page.goto(f"{live_server.url}/accounts/login/")
        page.get_by_label("Username").fill(user.username)
        page.get_by_label("Password").fill(password or f"pw-{user.username}")
        page.get_by_role("button", name="Log in").click()
        page.wait_for_url(f"{live_server.url}/")
        return page

    yield log_in
    # Closing the browser ends its keep-alive connections, and with them the server threads'
    # database sessions (and a cluster's, a moment after its processes): the test database can go.
    for context in contexts:
        context.close()
    started = time.monotonic()
    try:
        wait_for(lambda: not _other_sessions(), timeout=SLOW_TEARDOWN_S, message="other database sessions to end")
    except AssertionError:  # a slow teardown says on what it waited
        with connection.cursor() as cursor:
            waited_for = sessions_on_the_database(cursor)
        try:
            wait_for(lambda: not _other_sessions(), timeout=60, message="other database sessions to end")
        except AssertionError:
            with connection.cursor() as cursor:
                raise AssertionError(f"sessions still open: {sessions_on_the_database(cursor)}") from None
        warnings.warn(f"the log-in teardown waited {time.monotonic() - started:.0f} s for other sessions to "
                      f"end; sessions after {SLOW_TEARDOWN_S:g} s: {waited_for}", stacklevel=1)
