"""Providers' budgets, as the console shows them: each process publishes its own (ledger.budget).

A process writes its rows (one per provider it calls) when a provider's state changed, and every
REPUBLISH_S while one is throttled or open, from a thread that may use the database: after a
batch of looks is applied, and after a worker's call. `states()` reads them back, one line per
provider, the worst state of the processes heard from in the last STALE_AFTER_S.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models.functions import Now
from django.utils import timezone

from ledger.budget import BUDGET, CALLS_WINDOW_S
from reconciliation.models import ProviderState

REPUBLISH_S = 5.0
STALE_AFTER_S = 300
PROCESS = f"{socket.gethostname()}:{os.getpid()}"[:200]

_last = {"at": 0.0}
_lock = threading.Lock()


def publish(*, force: bool = False) -> bool:
    """Write this process's provider states if they changed (or are not ok and due again)."""
    with _lock:
        rows = BUDGET.snapshot()
        # Throttled or open, or called since: published again every REPUBLISH_S (the console shows
        # each provider called recently with its rate, not only those whose state changed).
        busy = BUDGET.called.is_set() or any(row["state"] != "ok" for row in rows)
        due = busy and time.monotonic() - _last["at"] >= REPUBLISH_S
        if not rows or not (force or BUDGET.changed.is_set() or due):
            return False
        BUDGET.changed.clear()
        BUDGET.called.clear()
        _last["at"] = time.monotonic()
    now = timezone.now()
    ProviderState.objects.bulk_create(
        [ProviderState(provider=row["provider"][:200], process=PROCESS, state=row["state"], rate=row["rate"],
                       open_until=now + timedelta(seconds=row["open_for_s"]) if row["open_for_s"] else None,
                       throttled=row["throttled"], reason=row["reason"][:200],
                       calls_last_minute=row["calls_last_minute"], updated_at=now)
         for row in rows],
        update_conflicts=True, unique_fields=["provider", "process"],
        update_fields=["state", "rate", "open_until", "throttled", "reason", "calls_last_minute", "updated_at"],
    )
    return True


ORDER = {"open": 0, "failing": 1, "throttled": 2, "ok": 3}


@dataclass(frozen=True)
class Line:
    """One provider on the overview: its worst state across the processes heard from."""

    provider: str
    state: str
    rate: float | None  # the sum of the processes' paces (throttled, or capped by RECKON_PROVIDER_LIMITS)
    open_until: datetime | None
    processes: int
    throttled: int
    reason: str
    updated_at: datetime
    calls_last_minute: int = 0  # the processes' calls in the minute before each last reported

    @property
    def calls_per_s(self) -> float:
        return self.calls_last_minute / CALLS_WINDOW_S


def states() -> list[Line]:
    """Every provider a process reported in the last STALE_AFTER_S. Its calls in the last minute
    are summed over the processes that reported within the last CALLS_WINDOW_S + REPUBLISH_S: a
    process that called since publishes again within REPUBLISH_S of its calls, so an older report
    means it has not called in the last minute."""
    rows = ProviderState.objects.filter(updated_at__gte=Now() - timedelta(seconds=STALE_AFTER_S))
    current_since = timezone.now() - timedelta(seconds=CALLS_WINDOW_S + REPUBLISH_S)
    by_provider: dict[str, list[ProviderState]] = {}
    for row in rows.order_by("provider", "process"):
        by_provider.setdefault(row.provider, []).append(row)
    lines = []
    for provider, group in by_provider.items():
        worst = min(group, key=lambda row: ORDER[row.state])
        paced = [row.rate for row in group if row.state != "open" and row.rate is not None]
        opened = [row.open_until for row in group if row.state == "open" and row.open_until]
        lines.append(Line(provider, worst.state, sum(paced) if paced else None, max(opened) if opened else None,
                          len(group), sum(row.throttled for row in group), worst.reason,
                          max(row.updated_at for row in group),
                          sum(row.calls_last_minute for row in group if row.updated_at >= current_since)))
    return sorted(lines, key=lambda line: (ORDER[line.state], line.provider))
