"""Everything the job page shows about one job, in a fixed number of queries."""

from __future__ import annotations

from dataclasses import dataclass

from django.shortcuts import get_object_or_404

from approvals.models import ApprovalRequest
from console.access import TenantFence
from ledger.invariants import first_broken_event
from ledger.models import Attempt, Job, LedgerEvent
from reconciliation.models import CheckOutcome, ReconciliationCheck


@dataclass
class JobRecord:
    job: Job
    attempts: list[Attempt]
    events: list[LedgerEvent]
    checks: list[ReconciliationCheck]
    approvals: list[ApprovalRequest]
    first_broken_event: int | None  # the id of the first event whose hash link fails; None: verified

    @property
    def latest(self) -> Attempt | None:
        return self.attempts[-1] if self.attempts else None

    @property
    def not_found_reason(self) -> str:
        """Why a replay is safe, when the latest reconciliation found nothing at the provider."""
        check = self.checks[-1] if self.checks else None
        if check is None or check.outcome != CheckOutcome.NOT_FOUND:
            return ""
        return check.evidence.get("reason", "")


def job_record(job_id: str, fence: TenantFence) -> JobRecord:
    """404 for a job outside the fence, exactly as for a missing one."""
    job = get_object_or_404(fence.jobs(), job_id=job_id)
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
        first_broken_event=first_broken_event(job.pk),
    )
