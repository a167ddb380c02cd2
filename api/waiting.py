"""Waiting for work without holding a database connection: one LISTEN per web process.

A claim that finds nothing and may wait registers a `Waiter` (its scope and an Event), closes its
own database connection and sleeps on the Event. One daemon thread per web process holds one
psycopg connection that LISTENs on `ledger.services.claimable.CHANNEL`; each notification names
a (tenant, action), and the thread wakes the waiters whose scope covers it, which then try to
claim again. So N waiting claims cost N idle threads and one connection, not N connections, and
nothing polls the database while no work arrives.

What could be missed is covered: the thread wakes every waiter whenever it (re)starts listening
(work committed before the LISTEN is found by that retry), and every waiter looks again every
RECKON_CLAIM_POLL_S seconds anyway. The thread starts with the first wait and stops after a
minute without waiters, so a process that never serves a wait opens no extra connection.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import psycopg
from django.db import connections
from psycopg.conninfo import make_conninfo

from ledger.services.claimable import CHANNEL, decode

log = logging.getLogger("reckon.api.claims")

IDLE_STOP_S = 60.0  # the listener closes its connection after this long without a waiter
RECONNECT_S = (0.5, 10.0)  # back-off bounds after the listening connection fails


class Waiter:
    """One waiting claim: what it may be given, and the Event that wakes it."""

    def __init__(self, matches: Callable[[str, str], bool]):
        self.matches = matches
        self._woken = threading.Event()

    def arm(self) -> None:
        """Forget earlier wake-ups: called before each look, so a wake-up during it is kept."""
        self._woken.clear()

    def wake(self) -> None:
        self._woken.set()

    def wait(self, timeout: float) -> bool:
        return self._woken.wait(timeout)


class ClaimWaits:
    """The waiters of this process and the thread that wakes them."""

    def __init__(self, limit: Callable[[], int], conninfo: Callable[[], str] | None = None):
        self._limit = limit
        self._conninfo = conninfo or listener_conninfo
        self._lock = threading.Lock()
        self._waiters: set[Waiter] = set()
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        self._stopping = threading.Event()
        self.listening = threading.Event()

    @contextmanager
    def waiter(self, matches: Callable[[str, str], bool]) -> Iterator[Waiter | None]:
        """A registered Waiter for the block, or None when this process holds its share of waits."""
        waiter = Waiter(matches)
        with self._lock:
            self._after_fork()
            if len(self._waiters) >= self._limit():
                waiter = None
            else:
                self._waiters.add(waiter)
                self._ensure_listening()
        try:
            yield waiter
        finally:
            if waiter is not None:
                with self._lock:
                    self._waiters.discard(waiter)

    @property
    def waiting(self) -> int:
        with self._lock:
            return len(self._waiters)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop listening (tests; a web process simply exits)."""
        with self._lock:
            thread = self._thread
            self._stopping.set()
        if thread is not None:
            thread.join(timeout)

    # -- the listening thread ----------------------------------------------------------------------

    def _after_fork(self) -> None:
        # A forked child (gunicorn --preload) inherits no thread: start afresh.
        if self._pid != os.getpid():
            self._pid, self._thread = os.getpid(), None
            self._waiters.clear()
            self.listening.clear()

    def _ensure_listening(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._stopping.clear()
            self._thread = threading.Thread(target=self._listen, name="reckon-claims-listener", daemon=True)
            self._thread.start()

    def _listen(self) -> None:
        backoff = RECONNECT_S[0]
        idle_since: float | None = None
        while not self._stopping.is_set():
            try:
                with psycopg.connect(self._conninfo(), autocommit=True) as listening:
                    listening.execute(f"LISTEN {CHANNEL}")
                    self.listening.set()
                    backoff = RECONNECT_S[0]
                    self._wake(None)  # whatever committed before we listened is found by a new look
                    while not self._stopping.is_set():
                        for notify in listening.notifies(timeout=1.0):
                            self._wake(decode(notify.payload))
                        idle_since = self._idle_since(idle_since)
                        if idle_since is not None and time.monotonic() - idle_since > IDLE_STOP_S:
                            with self._lock:
                                if not self._waiters:  # checked under the lock a new waiter takes
                                    self._thread = None
                                    self.listening.clear()
                                    return
            except (psycopg.Error, OSError) as exc:
                log.warning("claims listener lost its connection (%s); waiting claims poll until it is back", exc)
            self.listening.clear()
            self._stopping.wait(backoff)  # reconnect back-off; waiters keep polling meanwhile
            backoff = min(backoff * 2, RECONNECT_S[1])
        self.listening.clear()

    def _idle_since(self, idle_since: float | None) -> float | None:
        with self._lock:
            if self._waiters:
                return None
        return idle_since if idle_since is not None else time.monotonic()

    def _wake(self, work: tuple[str, str] | None) -> None:
        """Wake the waiters whose scope covers `work` (all of them when it is None)."""
        with self._lock:
            waiters = list(self._waiters)
        for waiter in waiters:
            if work is None or waiter.matches(*work):
                waiter.wake()


DJANGO_ONLY_OPTIONS = frozenset({"application_name", "prepare_threshold", "server_side_binding", "isolation_level",
                                 "pool", "assume_role", "cursor_factory", "context", "connect_timeout"})


def listener_conninfo() -> str:
    """The default database, as a libpq connection string of its own (not Django's connection)."""
    from django.conf import settings as django_settings

    if django_settings.RECKON_DIRECT_DATABASE:  # past a transaction pooler, which cannot carry a LISTEN
        settings = django_settings.RECKON_DIRECT_DATABASE
    else:
        settings = connections["default"].settings_dict
    # DATABASE_URL's libpq parameters (target_session_attrs=read-write: LISTEN on the primary),
    # not Django's or psycopg's own options.
    libpq = {key: value for key, value in settings.get("OPTIONS", {}).items() if key not in DJANGO_ONLY_OPTIONS}
    return make_conninfo(
        **libpq,
        dbname=settings["NAME"],
        user=settings["USER"] or None,
        password=settings["PASSWORD"] or None,
        host=settings["HOST"] or None,
        port=settings["PORT"] or None,
        application_name=f"reckon:claims-listener:{os.getpid()}",
        connect_timeout=5,
        keepalives=1,
        keepalives_idle=30,
    )
