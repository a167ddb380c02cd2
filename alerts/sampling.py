"""Sampling the unknown-work levels for the overview's charts: one row a minute (the schedule),
kept for eight days (the charts draw seven)."""

from __future__ import annotations

from datetime import timedelta

from django.db.models import Count, Min, Q
from django.utils import timezone

from alerts.models import LevelSample
from ledger.models import Job
from ledger.states import NEEDS_HUMAN, UNKNOWN_WORK

KEEP = timedelta(days=8)


def sample_levels() -> LevelSample:
    """Record the levels now (one COUNT over the unknown statuses, served by job_status_created)
    and drop samples older than KEEP."""
    now = timezone.now()
    levels = Job.objects.filter(status__in=UNKNOWN_WORK).aggregate(
        unknown=Count("id"), human=Count("id", filter=Q(status__in=NEEDS_HUMAN)), oldest=Min("created_at")
    )
    sample = LevelSample.objects.create(
        sampled_at=now,
        unknown_work=levels["unknown"],
        waiting_for_human=levels["human"],
        oldest_unknown_age_s=(now - levels["oldest"]).total_seconds() if levels["oldest"] else None,
    )
    LevelSample.objects.filter(sampled_at__lt=now - KEEP).delete()
    return sample
