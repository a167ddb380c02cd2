"""What the overview's charts draw, recorded once a minute by a schedule: the unknown-work levels
(not in the history cheaply) and per-hour counts of the charted event kinds (in the history, but
a week of a large ledger is too many rows to count on every page view). Both are kept eight days;
the charts draw seven."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import connection
from django.db.models import Count, Max, Min, Q
from django.utils import timezone

from alerts.models import EventCount, LevelSample
from ledger.models import Job, LedgerEvent
from ledger.states import FINISHED_JOB, NEEDS_HUMAN, UNKNOWN_WORK, EventKind

KEEP = timedelta(days=8)
HOUR = timedelta(hours=1)
COUNTED_KINDS = (
    EventKind.CLAIMED,
    EventKind.SUCCEEDED,
    EventKind.RECONCILED_CONFIRMED,
    EventKind.RECONCILED_NOT_FOUND,
    EventKind.RECONCILED_CONFLICT,
    EventKind.RECONCILIATION_UNAVAILABLE,
)


def sample_levels() -> LevelSample:
    """Record the levels now (one COUNT over the unknown statuses, served by job_status_created),
    the finished jobs per tenant and status (a pass over them: this is where it is paid), and
    drop samples older than KEEP."""
    now = timezone.now()
    levels = Job.objects.filter(status__in=UNKNOWN_WORK).aggregate(
        unknown=Count("id"), human=Count("id", filter=Q(status__in=NEEDS_HUMAN)), oldest=Min("created_at")
    )
    finished: dict[str, dict[str, int]] = {}
    for tenant, status, n in (
        Job.objects.filter(status__in=FINISHED_JOB).order_by().values_list("tenant", "status").annotate(n=Count("id"))
    ):
        finished.setdefault(tenant, {})[status] = n
    sample = LevelSample.objects.create(
        sampled_at=now,
        finished_jobs=finished,
        unknown_work=levels["unknown"],
        waiting_for_human=levels["human"],
        oldest_unknown_age_s=(now - levels["oldest"]).total_seconds() if levels["oldest"] else None,
    )
    LevelSample.objects.filter(sampled_at__lt=now - KEEP).delete()
    return sample


def _hour_of(at: datetime) -> datetime:
    return at.replace(minute=0, second=0, microsecond=0)


def count_events() -> datetime:
    """Count the charted events per hour and tenant from the last counted hour on, and drop
    counts older than KEEP; the hour counting started from.

    The hour before the current one is counted again each time: an event is stamped when its
    transaction starts, so one that commits late still lands in the hour it belongs to. The first
    run counts the last KEEP (once: the event_kind_at index, one pass)."""
    now = timezone.now()
    last = EventCount.objects.aggregate(last=Max("hour"))["last"]
    since = min(_hour_of(now) - HOUR, last) if last else _hour_of(now - KEEP)
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO alerts_eventcount (hour, kind, tenant, count) "
            "SELECT date_trunc('hour', e.at), e.kind, j.tenant, count(*) "
            f"FROM {LedgerEvent._meta.db_table} e JOIN {Job._meta.db_table} j ON j.id = e.job_id "  # nosec B608  # table names from the models; values bound
            "WHERE e.kind = ANY(%s) AND e.at >= %s GROUP BY 1, 2, 3 "
            "ON CONFLICT (hour, kind, tenant) DO UPDATE SET count = EXCLUDED.count",
            [[kind.value for kind in COUNTED_KINDS], since],
        )
    EventCount.objects.filter(hour__lt=now - KEEP).delete()
    return since
