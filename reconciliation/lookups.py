"""Looking unknown work up at its provider: with no lock held and no open transaction.

A reconciler (the action's `reconciler`: a dotted path, or a webhook — reconciliation/webhooks.py)
takes the job and the attempt in question and returns a `Finding` (findings.py). Lookups run a few at a time (`Lookups`), so a slow provider
never holds a row lock against workers or operators; what a reconciler needs from the ledger is
read beforehand.
"""

from __future__ import annotations

import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from django.conf import settings
from django.db import connections
from django.utils.module_loading import import_string

from ledger.actions import Webhook
from ledger.models import Attempt, Job
from reconciliation import webhooks
from reconciliation.findings import Finding, where_it_was_sent
from reconciliation.models import CheckOutcome


@dataclass(frozen=True)
class Look:
    """One job looked up: the attempt it was about and what was found (None: not queryable)."""

    job: Job
    attempt: Attempt
    reconciler: str | None
    finding: Finding | None
    duration_ms: int = 0
    by: object = None  # who answered (a resolution.By), when not Reckon's own reconciler


def look_up(job: Job, attempt: Attempt, reconciler: str | Webhook) -> Look:
    """Ask the provider (no lock, no transaction) and say what that proves."""
    started = time.monotonic()
    try:
        if isinstance(reconciler, Webhook):
            finding = webhooks.ask(reconciler, job, attempt)
        else:
            finding = import_string(reconciler)(job, attempt)
    except Exception as exc:  # a broken reconciler proves nothing either
        finding = Finding(CheckOutcome.UNAVAILABLE, f"reconciler raised {type(exc).__name__}: {exc}")
    if finding.outcome == CheckOutcome.NOT_FOUND and not finding.reason.strip():
        # "Not found" must say why a replay is safe; a lookup that cannot say so proves nothing.
        finding = Finding(CheckOutcome.UNAVAILABLE, "not_found without a stated reason why a replay is safe",
                          evidence=finding.evidence, asked=finding.asked)
    finding = where_it_was_sent(attempt, finding)
    return Look(job, attempt, str(reconciler)[:200], finding, int((time.monotonic() - started) * 1000))


def default_concurrency() -> int:
    """How many provider lookups a pass runs at once (RECKON_RECONCILE_CONCURRENCY, default 4)."""
    return max(1, settings.RECKON_RECONCILE_CONCURRENCY)


# How long a thread may keep the GIL while others wait for it (Python's default: 5 ms). A lookup
# whose answer has arrived waits for the GIL behind the thread applying results; at 5 ms a turn,
# with dozens of lookups in flight, that wait was a tenth of a 50 ms provider round trip.
SWITCH_INTERVAL_S = 0.0005


class Lookups:
    """Runs provider lookups, `size` at a time: in `size` threads, so that they go on while the
    caller does something else, or, with `background=False` and a size of 1, inline at submit.

    One thread per lookup in flight: a reconciler is plain blocking code (a dotted path of the
    team's own, or a webhook call), and a thread waiting on a socket costs no CPU. What threads
    do cost is the GIL's hand-over, so a process running lookups in threads hands it over sooner
    (SWITCH_INTERVAL_S, for the whole process: reconcilers and workers are I/O-bound).

    A lookup thread uses no database connection; should a reconciler open one anyway, it is
    closed when its lookup ends.
    """

    def __init__(self, size: int | None = None, *, background: bool = True):
        self.size = max(1, size if size is not None else default_concurrency())
        threads = background or self.size > 1
        self._pool = ThreadPoolExecutor(self.size, thread_name_prefix="reckon-lookup") if threads else None
        if threads and sys.getswitchinterval() > SWITCH_INTERVAL_S:
            sys.setswitchinterval(SWITCH_INTERVAL_S)

    def submit(self, fn, *args) -> Future:
        if self._pool is not None:
            return self._pool.submit(_in_lookup_thread, fn, *args)
        future = Future()
        try:
            future.set_result(fn(*args))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller through the future
            future.set_exception(exc)
        return future

    def map(self, fn, items) -> list:
        return [future.result() for future in [self.submit(fn, item) for item in items]]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> Lookups:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _in_lookup_thread(fn, *args):
    try:
        return fn(*args)
    finally:
        for opened in connections.all(initialized_only=True):
            opened.close()
