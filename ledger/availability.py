"""When the database has no primary to talk to: during a failover, a restart, a network cut.

Every Reckon process meets it the same way. A connection that broke is dropped, and the next
step opens a new one (libpq tries each host of a multi-host DATABASE_URL and keeps the one that
takes writes, `target_session_attrs=read-write`). A step that failed this way is not a step
that failed: whether its commit landed is unknown, so nothing is concluded from it. The
transitions are compare-and-set on the lease's owner and fencing token, so the step is simply
asked again, and either it finds its own write (done) or it applies it now; a request to the web
or the gateway answers 503 with Retry-After, and a loop waits and goes on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from django.db import DatabaseError, close_old_connections

log = logging.getLogger("reckon.database")

T = TypeVar("T")

# Seconds a client is told to wait (Retry-After) while there is no primary: about a Patroni loop.
RETRY_AFTER_S = 2

# SQLSTATE classes and codes that say "this server cannot take this now", not "this was wrong":
# 08 connection exceptions; 57P01-57P03 shutdown and start-up; 25006 a read-only transaction (a
# node that was demoted under an open connection); 40001/40P01 are not here (a conflict, not an outage).
_UNAVAILABLE_CLASSES = ("08",)
_UNAVAILABLE_CODES = frozenset({"57P01", "57P02", "57P03", "25006", "53300"})


def database_unavailable(exc: BaseException) -> bool:
    """Whether `exc` says the database could not be reached or cannot take writes right now."""
    from django.db import InterfaceError, OperationalError

    cause = exc.__cause__ if isinstance(exc, DatabaseError) and exc.__cause__ is not None else exc
    sqlstate = getattr(cause, "sqlstate", None)
    if sqlstate:
        return sqlstate.startswith(_UNAVAILABLE_CLASSES) or sqlstate in _UNAVAILABLE_CODES
    # No SQLSTATE: the connection itself failed (refused, closed, reset, timed out).
    if isinstance(exc, (InterfaceError, OperationalError)):
        return True
    try:
        import psycopg
    except ImportError:  # pragma: no cover - psycopg is a dependency
        return False
    return isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError))


def drop_broken_connections() -> None:
    """What Django does at each request, for a loop or a worker thread, which has none: a connection
    that failed (and no longer answers) or outlived CONN_MAX_AGE is closed, and the next query on a
    kept one is health-checked first (CONN_HEALTH_CHECKS), so it goes to whichever node is primary."""
    close_old_connections()


class Outage:
    """A loop's memory of an outage: it says when one begins and when it ends, once each."""

    def __init__(self, what: str):
        self.what = what
        self.since: float | None = None

    def survived(self, exc: BaseException) -> bool:
        """True (and the broken connections dropped) when `exc` is an outage; the loop goes on."""
        if not database_unavailable(exc):
            return False
        if self.since is None:
            self.since = time.monotonic()
            log.warning("%s: the database is unavailable (%s: %s); trying again", self.what, type(exc).__name__,
                        str(exc).strip().splitlines()[0] if str(exc).strip() else "")
        try:
            drop_broken_connections()
        except DatabaseError:
            pass
        return True

    def passed(self) -> None:
        if self.since is not None:
            log.warning("%s: the database answers again after %.1f s", self.what, time.monotonic() - self.since)
            self.since = None


def through_outage(step: Callable[[], T], outage: Outage) -> T | None:
    """`step()`, or None when the database was unavailable (the loop's next turn tries again)."""
    try:
        result = step()
    except DatabaseError as exc:
        if not outage.survived(exc):
            raise
        return None
    outage.passed()
    return result
