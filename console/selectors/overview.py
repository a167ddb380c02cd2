"""The overview's figures: delivery capacity beside workflow correctness, for the user's tenants.

The dead-man gate is the one figure that is not per tenant: it is about the background loops."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Count, Q
from django.utils import timezone
from django_q.models import OrmQ

from alerts.models import LevelSample
from approvals.models import ApprovalRequest, ApprovalStatus
from console.access import TenantFence
from console.selectors.queue import oldest_unknown_at, tab_counts, unknown_work_counts
from ledger.gate import Gate, gate_status
from ledger.models import Attempt, Job, LedgerEvent, RecoveryWindow
from ledger.services.recovery import current_window
from ledger.states import FINISHED_JOB, Execution, JobStatus
from reconciliation.models import CheckOutcome, ReconciliationCheck

RECENT = timedelta(hours=1)
# Named, not "not finished": an IN list lets the planner use the status index.
OPEN_JOB = tuple(s.value for s in JobStatus if s not in FINISHED_JOB)


@dataclass
class Overview:
    # The broker's queued deliveries; for a user fenced to some tenants, their jobs waiting for
    # a worker (the broker's rows do not say whose job they carry).
    queue_depth: int
    tenant_limited: bool
    busy_workers: int
    unknown_by_status: dict[str, int]
    oldest_unknown_at: datetime | None
    waiting_for_operator: int  # the queue's "Needs a human" tab, counted as the tab counts it
    blocked: int  # the queue's "Blocked, nothing sent" tab
    pending_approvals: int
    reconciliation_outcomes: dict[str, int]
    late_writes_recent: int
    late_writes_total: int
    jobs_by_status: list[tuple[str, int]]
    finished_counted_at: datetime | None  # when the finished jobs were counted (None: just now)
    gate: Gate
    recovery_window: RecoveryWindow | None  # ledger-wide, as the gate: new keys are looked up first
    duplicates_recent: int
    claims_recent: int

    @property
    def unknown_total(self) -> int:
        """Jobs whose effect may have happened; blocked jobs sent nothing and are counted apart."""
        return sum(n for status, n in self.unknown_by_status.items() if status != JobStatus.BLOCKED)

    @property
    def may_have_reached(self) -> dict[str, int]:
        """The unknown work by status, without the blocked jobs (the "Blocked, nothing sent" figure)."""
        return {status: n for status, n in self.unknown_by_status.items() if status != JobStatus.BLOCKED}

    @property
    def jobs_total(self) -> int:
        return sum(n for _, n in self.jobs_by_status)

    @property
    def duplicates_per_claim(self) -> float | None:
        """Refused duplicate deliveries per claimed delivery in the last hour (None: no claims)."""
        return self.duplicates_recent / self.claims_recent if self.claims_recent else None


def overview(fence: TenantFence) -> Overview:
    since = timezone.now() - RECENT
    unknown = unknown_work_counts(fence)
    outcomes = dict(
        fence.apply(ReconciliationCheck.objects.filter(checked_at__gte=since))
        .order_by()
        .values_list("outcome")
        .annotate(n=Count("id"))
    )
    late_writes = fence.apply(LedgerEvent.objects.filter(kind="late_write_rejected"))
    by_status, finished_counted_at = jobs_by_status(fence)
    # Both kinds over the last hour in one pass over the (kind, at) index.
    deliveries = fence.apply(
        LedgerEvent.objects.filter(kind__in=("duplicate_delivery", "claimed"), at__gte=since)
    ).aggregate(
        duplicates=Count("id", filter=Q(kind="duplicate_delivery")),
        claims=Count("id", filter=Q(kind="claimed")),
    )
    return Overview(
        queue_depth=OrmQ.objects.count() if fence.everything else by_status.get(JobStatus.PENDING.value, 0),
        tenant_limited=not fence.everything,
        busy_workers=fence.apply(Attempt.objects.filter(execution_state=Execution.RUNNING)).count(),
        unknown_by_status=unknown,
        oldest_unknown_at=oldest_unknown_at(fence),
        waiting_for_operator=tab_counts(unknown)["human"],
        blocked=tab_counts(unknown)["blocked"],
        pending_approvals=fence.apply(ApprovalRequest.objects.filter(status=ApprovalStatus.PENDING)).count(),
        reconciliation_outcomes={o.value: outcomes.get(o.value, 0) for o in CheckOutcome},
        late_writes_recent=late_writes.filter(at__gte=since).count(),
        late_writes_total=late_writes.count(),
        jobs_by_status=[(s.value, by_status.get(s.value, 0)) for s in JobStatus],
        finished_counted_at=finished_counted_at,
        gate=gate_status(),
        recovery_window=current_window(),
        duplicates_recent=deliveries["duplicates"],
        claims_recent=deliveries["claims"],
    )


def jobs_by_status(fence: TenantFence) -> tuple[dict[str, int], datetime | None]:
    """Jobs per status, and when the finished ones were counted (None: now).

    Open jobs are few and counted now over the job_status_created index; finished jobs are most
    of a large history, so they come from the latest sample (alerts.sampling, once a minute),
    and are counted here only until the first sample exists."""
    counts = fence.jobs(Job.objects.filter(status__in=OPEN_JOB)).counts_by_status()
    sample = LevelSample.objects.order_by("-sampled_at").values("sampled_at", "finished_jobs").first()
    if sample is None:
        return counts | fence.jobs(Job.objects.filter(status__in=FINISHED_JOB)).counts_by_status(), None
    for tenant, finished in sample["finished_jobs"].items():
        if fence.everything or tenant in fence.tenants:
            for status, n in finished.items():
                counts[status] = counts.get(status, 0) + n
    return counts, sample["sampled_at"]
