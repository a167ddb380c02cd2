"""The overview's charts over time: sampled unknown-work levels, and per-bucket counts of ledger
events (reconciliation outcomes, claimed deliveries).

Both come from what the sampling schedule records once a minute (alerts.sampling): levels from
alerts.LevelSample (every tenant, so only a user who sees every tenant gets them), event counts
from alerts.EventCount (per hour and tenant, so they follow the tenant fence). A page view reads
at most a week of those small rows, however large the history. The last hour's per-minute event
counts are read from the ledger's events themselves, so the minute in progress is counted live.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Count, DateTimeField, DurationField, F, Func, Max, Sum, Value
from django.utils import timezone

from alerts.models import EventCount, LevelSample
from console.access import TenantFence
from ledger.models import LedgerEvent
from ledger.states import EventKind

HOUR = timedelta(hours=1)


@dataclass(frozen=True)
class Window:
    key: str
    label: str
    step: timedelta
    buckets: int

    def start(self, now: datetime) -> datetime:
        """The first bucket's start: buckets are aligned to `step` (UTC), the last holds `now`."""
        epoch = datetime(1970, 1, 1, tzinfo=now.tzinfo)
        current = epoch + (now - epoch) // self.step * self.step
        return current - (self.buckets - 1) * self.step


WINDOWS = {
    "1h": Window("1h", "last hour", timedelta(minutes=1), 60),
    "24h": Window("24h", "last 24 hours", timedelta(hours=1), 24),
    "7d": Window("7d", "last 7 days", timedelta(hours=6), 28),
}

OUTCOME_KINDS = {
    EventKind.RECONCILED_CONFIRMED: "confirmed",
    EventKind.RECONCILED_NOT_FOUND: "not_found",
    EventKind.RECONCILED_CONFLICT: "conflict",
    EventKind.RECONCILIATION_UNAVAILABLE: "unavailable",
}
THROUGHPUT_KINDS = {EventKind.CLAIMED: "claimed", EventKind.SUCCEEDED: "succeeded"}


class DateBin(Func):
    """PostgreSQL's date_bin(stride, source, origin): the start of the bucket `source` falls in."""

    function = "date_bin"
    output_field = DateTimeField()


@dataclass
class Series:
    """Values per bucket for each named series; None where nothing was sampled."""

    starts: list[datetime]
    values: dict[str, list[float | None]]
    # The bucket that holds this moment, when its figure is a count so far (not yet the bucket's
    # whole): drawn apart, as "so far", never read as a drop to the bucket's end.
    in_progress: int | None = None


def _bin(window: Window, start: datetime, field: str) -> DateBin:
    return DateBin(Value(window.step, output_field=DurationField()), F(field), Value(start))


def event_counts(window: Window, fence: TenantFence, kinds: dict[str, str], now: datetime | None = None) -> Series:
    start = window.start(now or timezone.now())
    if window.step < HOUR:
        return _recent_event_counts(window, start, fence, kinds)
    rows = (
        fence.apply(EventCount.objects.filter(kind__in=list(kinds), hour__gte=start), "tenant")
        .annotate(bucket=_bin(window, start, "hour"))
        .order_by()
        .values_list("bucket", "kind")
        .annotate(n=Sum("count"))
    )
    return _series(window, start, kinds, rows)


def _recent_event_counts(window: Window, start: datetime, fence: TenantFence, kinds: dict[str, str]) -> Series:
    """Buckets shorter than the sampled hours, counted from the ledger itself, up to this moment:
    an index range over the window's events of each kind (event_kind_at), so the cost follows the
    last hour's traffic, not the history's size."""
    events = LedgerEvent.objects.filter(kind__in=list(kinds), at__gte=start)
    rows = (
        fence.apply(events)
        .annotate(bucket=_bin(window, start, "at"))
        .order_by()
        .values_list("bucket", "kind")
        .annotate(n=Count("id"))
    )
    return _series(window, start, kinds, rows)


def _series(window: Window, start: datetime, kinds: dict[str, str], rows) -> Series:
    starts = [start + i * window.step for i in range(window.buckets)]
    index = {bucket: i for i, bucket in enumerate(starts)}
    values = {name: [0] * window.buckets for name in kinds.values()}
    for bucket, kind, n in rows:
        if bucket in index:  # an event stamped in the future (clock skew) is left out
            values[kinds[kind]][index[bucket]] = n
    return Series(starts, values, in_progress=window.buckets - 1)


def levels(window: Window, now: datetime | None = None) -> Series:
    """The highest sampled level in each bucket (what the bucket's worst moment looked like)."""
    start = window.start(now or timezone.now())
    rows = (
        LevelSample.objects.filter(sampled_at__gte=start)
        .annotate(bucket=_bin(window, start, "sampled_at"))
        .order_by()
        .values("bucket")
        .annotate(unknown=Max("unknown_work"), human=Max("waiting_for_human"), oldest=Max("oldest_unknown_age_s"))
    )
    starts = [start + i * window.step for i in range(window.buckets)]
    index = {bucket: i for i, bucket in enumerate(starts)}
    values = {name: [None] * window.buckets for name in ("unknown", "human", "oldest")}
    for row in rows:
        if row["bucket"] in index:
            for name in values:
                # A bucket sampled while nothing was unknown has no oldest age: draw it as 0.
                values[name][index[row["bucket"]]] = row[name] if row[name] is not None else 0
    return Series(starts, values)
