"""The four conditions Reckon alerts on, each read from the ledger as it is now.

Each check returns a `Reading`: whether the condition holds, a sentence saying what (with the
figures), and the console path of the queue filtered to it. The ages are counted from the job's
creation, as on the overview and in the queue's "Age" filter, so the link shows the same jobs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import urlencode

from django.conf import settings
from django.db.models import Exists, OuterRef
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


def queue_path(**filters) -> str:
    return reverse("queue") + "?" + urlencode(filters)


def _older_than_minutes(bound_s: float) -> int:
    # The queue's filter counts whole minutes; rounding down keeps every job past the bound in.
    return max(1, math.floor(bound_s / 60))


def unknown_too_old() -> Reading:
    bound = settings.RECKON_ALERT_UNKNOWN_AGE_S
    cutoff = timezone.now() - timedelta(seconds=bound)
    old = Job.objects.filter(status__in=UNKNOWN_WORK, created_at__lt=cutoff)
    oldest = old.order_by("created_at").values("job_id", "status", "created_at").first()
    condition = AlertCondition.UNKNOWN_TOO_OLD
    if oldest is None:
        return Reading(condition, False, f"No unknown work is older than {duration(bound)}.",
                       queue_path(tab="human"))
    count = old.count()
    tab = "reconciling" if oldest["status"] == JobStatus.NEEDS_RECONCILIATION else "human"
    age = (timezone.now() - oldest["created_at"]).total_seconds()
    return Reading(
        condition, True,
        f"{count} unknown job{'s' if count != 1 else ''} older than {duration(bound)}; the oldest, "
        f"{oldest['job_id']} ({oldest['status']}), has waited {duration(age)}.",
        queue_path(tab=tab, older_than=_older_than_minutes(bound)),
    )


def approval_waiting() -> Reading:
    bound = settings.RECKON_ALERT_APPROVAL_WAIT_S
    cutoff = timezone.now() - timedelta(seconds=bound)
    waiting = ApprovalRequest.objects.filter(status=ApprovalStatus.PENDING, created_at__lt=cutoff)
    oldest = waiting.order_by("created_at").values("job__job_id", "created_at").first()
    condition = AlertCondition.APPROVAL_WAITING
    # A job waiting for approval was created before its request, so the Age filter keeps it.
    path = queue_path(tab="human", status=JobStatus.AWAITING_APPROVAL.value, older_than=_older_than_minutes(bound))
    if oldest is None:
        return Reading(condition, False, f"No approval has waited longer than {duration(bound)}.", path)
    count = waiting.count()
    age = (timezone.now() - oldest["created_at"]).total_seconds()
    return Reading(
        condition, True,
        f"{count} approval request{'s' if count != 1 else ''} waiting longer than {duration(bound)}; the "
        f"oldest, for {oldest['job__job_id']}, has waited {duration(age)}.",
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
    ids = list(conflicted.order_by("created_at").values_list("job_id", flat=True)[:6])
    path = queue_path(tab="human", status=JobStatus.ESCALATED.value)
    if not ids:
        return Reading(AlertCondition.RECONCILIATION_CONFLICT, False,
                       "No job escalated by a reconciliation conflict is waiting.", path)
    count = conflicted.count()
    shown = ", ".join(ids[:5]) + (", …" if count > 5 else "")
    return Reading(
        AlertCondition.RECONCILIATION_CONFLICT, True,
        f"Reconciliation answered conflict: {count} escalated job{'s' if count != 1 else ''} need a person "
        f"({shown}).",
        path,
    )


CHECKS = (unknown_too_old, approval_waiting, gate_closed, reconciliation_conflict)
