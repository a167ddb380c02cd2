"""What left the database (issue 28): archived jobs by id or key, and which periods are online."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Q
from django.db.models.functions import Upper

from console.access import TenantFence
from ledger.models import HistoryCheckpoint, JobTombstone
from ledger.partitions import covered_until, partitions

SHOWN = 20


def archived_jobs(query: str, fence: TenantFence) -> list[JobTombstone]:
    """Archived jobs whose id or key starts with `query` (any case), in the user's tenants."""
    if not query:
        return []
    text = query.upper()
    matching = JobTombstone.objects.annotate(id_upper=Upper("job_id"), key_upper=Upper("idempotency_key")).filter(
        Q(id_upper__startswith=text) | Q(key_upper__startswith=text))
    return list(fence.apply(matching, "tenant").select_related("checkpoint").order_by("job_id")[:SHOWN])


def archived_job(job_id: str, fence: TenantFence) -> JobTombstone | None:
    return fence.apply(JobTombstone.objects.filter(job_id=job_id), "tenant").select_related("checkpoint").first()


@dataclass
class HistoryPeriods:
    archived: list[HistoryCheckpoint]
    online_from: datetime | None
    online_until: datetime | None  # events can be written until then (the partitions made ahead)


def history_periods() -> HistoryPeriods:
    online = partitions()
    return HistoryPeriods(archived=list(HistoryCheckpoint.objects.order_by("range_start")),
                          online_from=online[0].start if online else None, online_until=covered_until())
