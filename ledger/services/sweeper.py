"""The lease sweeper: what happens to work whose worker vanished."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db import transaction

from ledger.gate import record_pass
from ledger.models import Attempt, Job
from ledger.services.core import (
    ClockTimestamp,
    latest_attempt,
    lock_job,
    open_next_attempt,
    transition,
)
from ledger.states import ActorType, Delivery, Execution, JobStatus, SideEffect


@dataclass
class SweepResult:
    reclaimed: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    exhausted: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return len(self.reclaimed) + len(self.unknown) + len(self.exhausted)


def sweep_expired_leases(*, limit: int = 500, actor: str = "lease-sweeper") -> SweepResult:
    """Expired + not_attempted -> next attempt; expired + submitted -> unknown, reconcile."""
    result = SweepResult()
    due = list(
        Attempt.objects.filter(execution_state=Execution.RUNNING, lease_expires_at__lt=ClockTimestamp())
        .order_by("lease_expires_at")
        .values_list("job__job_id", flat=True)[:limit]
    )
    for job_id in due:
        with transaction.atomic():
            job = lock_job(job_id=job_id, skip_locked=True)
            if job is None:
                continue  # a worker or another sweeper holds it right now
            attempt = latest_attempt(job)
            if attempt.execution_state != Execution.RUNNING or attempt.lease_expires_at >= job.db_now:
                continue  # renewed or finished since we looked
            lost_effect = attempt.side_effect_state == SideEffect.SUBMITTED
            next_attempt = expire_lease(job, attempt, actor=actor, actor_type=ActorType.SYSTEM)
            if lost_effect:
                result.unknown.append(job_id)
            elif next_attempt is None:
                result.exhausted.append(job_id)
            else:
                result.reclaimed.append(job_id)
    record_pass("sweeper")  # a completed pass keeps the dead-man gate open
    return result


def expire_lease(
    job: Job, attempt: Attempt, *, actor: str, actor_type: str, dispatch: bool = True
) -> Attempt | None:
    """Handle an expired lease: dead-letter and reopen, or mark unknown. Returns the queued attempt."""
    expired = {
        "lease_owner": attempt.lease_owner,
        "fencing_token": attempt.lease_token,
        "lease_expires_at": attempt.lease_expires_at.isoformat(),
    }
    if attempt.side_effect_state == SideEffect.SUBMITTED:
        note = (
            f"lease of {attempt.lease_owner} expired after the side effect was submitted: "
            "whether it happened is unknown"
        )
        transition(
            job,
            attempt,
            actor_type=actor_type,
            actor=actor,
            kind="lease_expired_unknown",
            job_status=JobStatus.NEEDS_RECONCILIATION,
            delivery_state=Delivery.DEAD_LETTERED,
            execution_state=Execution.UNKNOWN,
            side_effect_state=SideEffect.AMBIGUOUS,
            error=note,
            note=note,
            evidence=expired,
        )
        return None
    note = f"lease of {attempt.lease_owner} expired before any side effect; safe to run again"
    transition(
        job,
        attempt,
        actor_type=actor_type,
        actor=actor,
        kind="lease_expired_reclaimed",
        delivery_state=Delivery.DEAD_LETTERED,
        execution_state=Execution.FAILED,
        error=note,
        note=note,
        evidence=expired,
    )
    return open_next_attempt(job, attempt, actor=actor, actor_type=actor_type, dispatch=dispatch)
