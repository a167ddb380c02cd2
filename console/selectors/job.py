"""Everything the job page shows about one job, in a fixed number of queries."""

from __future__ import annotations

from dataclasses import dataclass

from django.shortcuts import get_object_or_404

from approvals.models import ApprovalRequest
from ledger.models import Attempt, Job, LedgerEvent
from reconciliation.models import ReconciliationCheck


@dataclass
class JobRecord:
    job: Job
    attempts: list[Attempt]
    events: list[LedgerEvent]
    checks: list[ReconciliationCheck]
    approvals: list[ApprovalRequest]

    @property
    def latest(self) -> Attempt | None:
        return self.attempts[-1] if self.attempts else None

    @property
    def duplicate_deliveries(self) -> int:
        return sum(1 for event in self.events if event.kind == "duplicate_delivery")


def job_record(job_id: str) -> JobRecord:
    job = get_object_or_404(Job, job_id=job_id)
    return JobRecord(
        job=job,
        attempts=list(job.attempts.order_by("number")),
        events=list(job.events.select_related("attempt").order_by("id")),
        checks=list(ReconciliationCheck.objects.filter(job=job).select_related("attempt").order_by("id")),
        approvals=list(
            ApprovalRequest.objects.filter(job=job)
            .select_related("attempt", "requested_by", "decided_by")
            .order_by("-id")
        ),
    )
