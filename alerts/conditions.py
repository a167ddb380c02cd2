"""The four conditions Reckon alerts on, each read from the ledger as it is now.

Each check returns a `Reading`: whether the condition holds, a sentence saying what (with the
figures), and the console path of the queue filtered to it. The ages are counted from the job's
creation, as on the overview and in the queue's "Age" filter, so the link shows the same jobs.

An alert goes to one channel for the whole deployment, so it names no job: it counts the jobs per
tenant, and the link shows each person the jobs of their own tenants (the console's fence).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import urlencode

from django.conf import settings
from django.db.models import Count, Exists, OuterRef, QuerySet
from django.urls import reverse
from django.utils import timezone

from alerts.models import AlertCondition
from approvals.models import ApprovalRequest, ApprovalStatus
from ledger.gate import gate_status
from ledger.models import Job, LedgerEvent
from ledger.states import UNKNOWN_WORK, EventKind, JobStatus


@dataclass(frozen=True)
class Reading:
    condition: AlertCondition
    firing: bool
    summary: str
    path: str


def duration(seconds: float) -> str:
    """'3 h 5 min', '12 min', '40 s': how long, for a sentence."""
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds} s"
    hours, minutes = divmod(seconds // 60, 60)
    if not hours:
        return f"{minutes} min"
    days, hours = divmod(hours, 24)
    text = f"{days} d {hours} h" if days else f"{hours} h"
    return text if days or not minutes else f"{text} {minutes} min"


# How many tenants an alert names; the others are counted together.
TENANTS_SHOWN = 5


def per_tenant(jobs: QuerySet, tenant_field: str = "tenant") -> str:
    """'acme 3, globex 1': how many of `jobs` each tenant has, the most first."""
    counts = list(jobs.order_by().values(tenant_field).annotate(n=Count("pk")).order_by("-n", tenant_field))
    shown = [f"{row[tenant_field]} {row['n']}" for row in counts[:TENANTS_SHOWN]]
    if len(counts) > TENANTS_SHOWN:
        rest = sum(row["n"] for row in counts[TENANTS_SHOWN:])
        shown.append(f"{rest} in {len(counts) - TENANTS_SHOWN} other tenants")
    return ", ".join(shown)


def queue_path(**filters) -> str:
    return reverse("queue") + "?" + urlencode(filters)


def _older_than_minutes(bound_s: float) -> int:
    # The queue's filter counts whole minutes; rounding down keeps every job past the bound in.
    return max(1, math.floor(bound_s / 60))


def unknown_too_old() -> Reading:
    bound = settings.RECKON_ALERT_UNKNOWN_AGE_S
    cutoff = timezone.now() - timedelta(seconds=bound)
    old = Job.objects.filter(status__in=UNKNOWN_WORK, created_at__lt=cutoff)
    oldest = old.order_by("created_at").values("tenant", "status", "created_at").first()
    condition = AlertCondition.UNKNOWN_TOO_OLD
    if oldest is None:
        return Reading(condition, False, f"No unknown work is older than {duration(bound)}.",
                       queue_path(tab="human"))
    count = old.count()
    tab = "reconciling" if oldest["status"] == JobStatus.NEEDS_RECONCILIATION else "human"
    age = (timezone.now() - oldest["created_at"]).total_seconds()
    return Reading(
        condition, True,
        f"{count} unknown job{'s' if count != 1 else ''} older than {duration(bound)} ({per_tenant(old)}); "
        f"the oldest ({oldest['tenant']}, {oldest['status']}) has waited {duration(age)}.",
        queue_path(tab=tab, older_than=_older_than_minutes(bound)),
    )


def approval_waiting() -> Reading:
    bound = settings.RECKON_ALERT_APPROVAL_WAIT_S
    cutoff = timezone.now() - timedelta(seconds=bound)
    waiting = ApprovalRequest.objects.filter(status=ApprovalStatus.PENDING, created_at__lt=cutoff)
    oldest = waiting.order_by("created_at").values("job__tenant", "created_at").first()
    condition = AlertCondition.APPROVAL_WAITING
    # A job waiting for approval was created before its request, so the Age filter keeps it.
    path = queue_path(tab="human", status=JobStatus.AWAITING_APPROVAL.value, older_than=_older_than_minutes(bound))
    if oldest is None:
        return Reading(condition, False, f"No approval has waited longer than {duration(bound)}.", path)
    count = waiting.count()
    age = (timezone.now() - oldest["created_at"]).total_seconds()
    return Reading(
        condition, True,
        f"{count} approval request{'s' if count != 1 else ''} waiting longer than {duration(bound)} "
        f"({per_tenant(waiting, 'job__tenant')}); the oldest ({oldest['job__tenant']}) has waited {duration(age)}.",
        path,
    )


def gate_closed() -> Reading:
    gate = gate_status()
    # The held jobs are not in the queue (they wait for workers): the overview shows the gate.
    path = reverse("overview")
    if gate.open:
        return Reading(AlertCondition.GATE_CLOSED, False, "The dead-man gate is open.", path)
    held = Job.objects.filter(gated_at__isnull=False).count()
    return Reading(
        AlertCondition.GATE_CLOSED, True,
        f"The dead-man gate is closed: {gate.reason}. {held} job{'s' if held != 1 else ''} held.", path,
    )


def reconciliation_conflict() -> Reading:
    """Jobs a provider's `conflict` answer escalated, still waiting for a person."""
    conflicted = Job.objects.filter(status=JobStatus.ESCALATED).filter(
        Exists(LedgerEvent.objects.filter(job=OuterRef("pk"), kind=EventKind.RECONCILED_CONFLICT))
    )
    path = queue_path(tab="human", status=JobStatus.ESCALATED.value)
    count = conflicted.count()
    if not count:
        return Reading(AlertCondition.RECONCILIATION_CONFLICT, False,
                       "No job escalated by a reconciliation conflict is waiting.", path)
    return Reading(
        AlertCondition.RECONCILIATION_CONFLICT, True,
        f"Reconciliation answered conflict: {count} escalated job{'s' if count != 1 else ''} need a person "
        f"({per_tenant(conflicted)}).",
        path,
    )


CHECKS = (unknown_too_old, approval_waiting, gate_closed, reconciliation_conflict)
