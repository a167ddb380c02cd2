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

from ledger.budget import BUDGET
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
        busy = any(row["state"] != "ok" for row in rows)
        due = busy and time.monotonic() - _last["at"] >= REPUBLISH_S
        if not rows or not (force or BUDGET.changed.is_set() or due):
            return False
        BUDGET.changed.clear()
        _last["at"] = time.monotonic()
    now = timezone.now()
    ProviderState.objects.bulk_create(
        [ProviderState(provider=row["provider"][:200], process=PROCESS, state=row["state"], rate=row["rate"],
                       open_until=now + timedelta(seconds=row["open_for_s"]) if row["open_for_s"] else None,
                       throttled=row["throttled"], reason=row["reason"][:200], updated_at=now)
         for row in rows],
        update_conflicts=True, unique_fields=["provider", "process"],
        update_fields=["state", "rate", "open_until", "throttled", "reason", "updated_at"],
    )
    return True


ORDER = {"open": 0, "throttled": 1, "ok": 2}


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


def states() -> list[Line]:
    rows = ProviderState.objects.filter(updated_at__gte=Now() - timedelta(seconds=STALE_AFTER_S))
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
                          max(row.updated_at for row in group)))
    return sorted(lines, key=lambda line: (ORDER[line.state], line.provider))
