"""The event table's partitions: ranges of `at`, created ahead of time (issue 28).

ledger_ledgerevent is partitioned by range of `at` (migration 0020). A partition covers
RECKON_HISTORY_PARTITION_DAYS days, aligned on the Unix epoch, and is named after its first day
(ledger_ledgerevent_p20261201); the first one, made by the migration, holds the history written
before partitioning. An event whose time falls in no partition cannot be written, so
`ensure_ahead` keeps RECKON_HISTORY_PARTITIONS_AHEAD partitions' worth of days covered beyond now:
after every migrate, on a schedule (config/schedules.py) and by `manage.py partitions`.
Gaps are filled, never overlapped: a partition is cut short where an existing one begins, so
changing the length later is safe.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import connection, transaction

from ledger.models import HistoryCheckpoint

EVENTS = "ledger_ledgerevent"
_BOUND = re.compile(r"FOR VALUES FROM \('([^']+)'\) TO \('([^']+)'\)")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Partition:
    name: str
    start: datetime
    end: datetime


def _parse(value: str) -> datetime:
    if re.search(r"[+-]\d\d$", value):
        value += ":00"
    return datetime.fromisoformat(value).astimezone(UTC)


def partitions(cursor=None) -> list[Partition]:
    """The event table's partitions, oldest first."""
    sql = ("SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i "
           "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = %s::regclass")
    if cursor is None:
        with connection.cursor() as own:
            own.execute(sql, [EVENTS])
            rows = own.fetchall()
    else:
        cursor.execute(sql, [EVENTS])
        rows = cursor.fetchall()
    found = []
    for name, bound in rows:
        match = _BOUND.search(bound)
        if match:
            found.append(Partition(name, _parse(match.group(1)), _parse(match.group(2))))
    return sorted(found, key=lambda p: p.start)


def _aligned(moment: datetime, days: int) -> datetime:
    step = timedelta(days=days)
    return EPOCH + ((moment - EPOCH) // step) * step


def ensure(since: datetime, until: datetime, *, days: int | None = None) -> list[str]:
    """Create the partitions that cover [since, until) where none does yet; their names."""
    days = days or settings.RECKON_HISTORY_PARTITION_DAYS
    step = timedelta(days=days)
    made = []
    with transaction.atomic(), connection.cursor() as cursor:
        # One creator at a time (the schedule on two clusters, a migrate, the command).
        cursor.execute("SELECT pg_advisory_xact_lock(hashtext('reckon.partitions'))")
        existing = partitions(cursor)
        # An archived period stays archived: no partition is made again over its range.
        existing += [Partition(c.partition, c.range_start, c.range_end) for c in HistoryCheckpoint.objects.all()]
        moment = since
        while moment < until:
            inside = next((p for p in existing if p.start <= moment < p.end), None)
            if inside:
                moment = inside.end
                continue
            # A gap: from its aligned start, or where the partition before it ends.
            moment = max([_aligned(moment, days), *(p.end for p in existing if p.end <= moment)])
            end = _aligned(moment, days) + step
            following = [p.start for p in existing if p.start > moment]
            end = min([end, *following])
            name = f"{EVENTS}_p{moment:%Y%m%d}" + ("" if moment == _aligned(moment, days) else f"_{moment:%H%M%S}")
            cursor.execute(f'CREATE TABLE "{name}" PARTITION OF {EVENTS} FOR VALUES FROM (%s) TO (%s)',  # nosec B608  # the name is made here from a date
                           [moment, end])
            existing.append(Partition(name, moment, end))
            made.append(name)
            moment = end
    return made


def ensure_ahead(now: datetime | None = None) -> list[str]:
    """Partitions from now to RECKON_HISTORY_PARTITIONS_AHEAD partitions' worth of days ahead."""
    now = now or datetime.now(UTC)
    days = settings.RECKON_HISTORY_PARTITION_DAYS
    return ensure(now, now + timedelta(days=days * settings.RECKON_HISTORY_PARTITIONS_AHEAD), days=days)


def covered_until(now: datetime | None = None) -> datetime | None:
    """The end of the unbroken run of partitions that holds `now`: events can be written until then."""
    now = now or datetime.now(UTC)
    end = None
    for partition in partitions():
        if partition.start <= (end or now) < partition.end:
            end = partition.end
    return end
