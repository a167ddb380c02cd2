"""The lease sweeper: what happens to work whose worker vanished."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import DateTimeField, DurationField, ExpressionWrapper, Value

from ledger import rewind
from ledger.actions import declared_action
from ledger.models import Attempt, Job
from ledger.services.gate import complete_pass
from ledger.services.transitions import Batch, ClockTimestamp, latest_attempt, lock_job
from ledger.states import ActorType, Delivery, EventKind, Execution, JobStatus, SideEffect


@dataclass
class SweepResult:
    reclaimed: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    exhausted: list[str] = field(default_factory=list)
    redispatched: list[str] = field(default_factory=list)
    retried: list[str] = field(default_factory=list)  # waited for their backoff or circuit: dispatched

    @property
    def total(self) -> int:
        return (len(self.reclaimed) + len(self.unknown) + len(self.exhausted) + len(self.redispatched)
                + len(self.retried))


def sweep_expired_leases(*, limit: int = 500, actor: str = "lease-sweeper") -> SweepResult:
    """Expired + not_attempted -> next attempt; expired + submitted -> unknown, reconcile."""
    rewind.tick()  # the sweeper's loop is also the ledger watch's heartbeat (at most once a second)
    result = SweepResult()
    due = list(
        Attempt.objects.filter(execution_state=Execution.RUNNING, lease_expires_at__lt=ClockTimestamp())
        .order_by("lease_expires_at")
        .values_list("job__job_id", flat=True)[:limit]
    )
    for job_id in due:
        outcome = sweep_expired_lease(job_id=job_id, actor=actor)
        if outcome:
            getattr(result, outcome).append(job_id)
    result.retried = dispatch_due_retries(limit=limit, actor=actor)
    result.redispatched = redispatch_stranded_jobs(limit=limit, actor=actor)
    complete_pass("sweeper")  # a completed pass keeps the dead-man gate open
    return result


def sweep_expired_lease(*, job_id: str, actor: str = "lease-sweeper") -> str:
    """The sweep of one job: if its running attempt's lease has expired, expire it (expire_lease).
    What became of it ("unknown", "exhausted" or "reclaimed"), or "" when there was nothing to do
    (not running, renewed meanwhile, or held by a worker or another sweeper right now). Whoever finds
    an expired lease (the sweeper's pass, the MCP gateway meeting one) sweeps it through here."""
    with transaction.atomic():
        job = lock_job(job_id=job_id, skip_locked=True)
        if job is None:
            return ""  # a worker or another sweeper holds it right now
        attempt = latest_attempt(job)
        if attempt.execution_state != Execution.RUNNING or attempt.lease_expires_at >= job.db_now:
            return ""  # renewed or finished since we looked
        lost_effect = attempt.side_effect_state == SideEffect.SUBMITTED
        next_attempt = expire_lease(job, attempt, actor=actor, actor_type=ActorType.SYSTEM)
    if lost_effect:
        return "unknown"
    return "exhausted" if next_attempt is None else "reclaimed"


def dispatch_due_retries(*, limit: int = 500, actor: str = "lease-sweeper") -> list[str]:
    """Jobs whose next attempt waited for its time (a retryable failure's backoff, an open circuit:
    `Job.retry_at`) and whose time has come are handed to the workers."""
    due = list(
        Job.objects.filter(status=JobStatus.PENDING, retry_at__lte=ClockTimestamp())
        .order_by("retry_at").values_list("job_id", flat=True)[:limit]
    )
    dispatched = []
    for job_id in due:
        with transaction.atomic():
            job = lock_job(job_id=job_id, skip_locked=True)
            if job is None or job.status != JobStatus.PENDING or job.retry_at is None or job.retry_at > job.db_now:
                continue
            if job.gated_at or job.recovery_pending:  # the gate or the recovery dispatches it when they let go
                with Batch() as batch:
                    batch.update_job(job, retry_at=None)
                continue
            attempt = latest_attempt(job)
            with Batch() as batch:
                batch.update_job(job, touch=True)
                batch.record_unchanged(job, attempt, actor_type=ActorType.SYSTEM, actor=actor,
                                       kind=EventKind.REDISPATCHED,
                                       note=f"attempt {attempt.number} waited for its time: dispatched to the workers")
                batch.dispatch_run(job)
            dispatched.append(job_id)
    return dispatched


def redispatch_stranded_jobs(*, limit: int = 500, actor: str = "lease-sweeper") -> list[str]:
    """Queued work whose delivery was lost (a task that failed while the database was down, a
    dispatch that never left a crashed process) is handed to the workers again.

    A job counts as stranded when it has been pending, unclaimed, for RECKON_REDISPATCH_AFTER_S.
    A second delivery of a job that was not stranded is harmless: the claim refuses it.
    """
    stale = ExpressionWrapper(
        ClockTimestamp() - Value(timedelta(seconds=settings.RECKON_REDISPATCH_AFTER_S), DurationField()),
        output_field=DateTimeField(),
    )
    candidates = list(
        Job.objects.filter(status=JobStatus.PENDING, updated_at__lt=stale, gated_at__isnull=True,
                           recovery_pending=False, retry_at__isnull=True)
        .order_by("updated_at").values_list("job_id", flat=True)[:limit]
    )
    redispatched = []
    for job_id in candidates:
        with transaction.atomic():
            job = lock_job(job_id=job_id, skip_locked=True)
            if job is None or job.status != JobStatus.PENDING or job.gated_at or job.recovery_pending or job.retry_at:
                continue
            with Batch() as batch:
                batch.update_job(job, touch=True)  # stranded again only after another threshold
                batch.record_unchanged(job, latest_attempt(job), actor_type=ActorType.SYSTEM, actor=actor,
                                       kind=EventKind.REDISPATCHED,
                                       note="queued work with no delivery in sight: dispatched to the workers again")
                batch.dispatch_run(job)
            redispatched.append(job_id)
    return redispatched


def expire_lease(
    job: Job, attempt: Attempt, *, actor: str, actor_type: str, dispatch: bool = True
) -> Attempt | None:
    """Handle an expired lease: dead-letter and reopen, or mark unknown. Returns the queued attempt."""
    expired = {
        "lease_owner": attempt.lease_owner,
        "fencing_token": attempt.lease_token,
        "lease_expires_at": attempt.lease_expires_at.isoformat(),
    }
    common = {"actor_type": actor_type, "actor": actor, "delivery_state": Delivery.DEAD_LETTERED, "evidence": expired}
    with Batch() as batch:
        if attempt.side_effect_state == SideEffect.SUBMITTED:
            note = (
                f"lease of {attempt.lease_owner} expired after the side effect was submitted: "
                "whether it happened is unknown"
            )
            batch.transition(job, attempt, **common, kind=EventKind.LEASE_EXPIRED_UNKNOWN,
                             job_status=JobStatus.NEEDS_RECONCILIATION, job_fields=first_look(job),
                             execution_state=Execution.UNKNOWN, side_effect_state=SideEffect.AMBIGUOUS,
                             error=note, note=note)
            return None
        note = f"lease of {attempt.lease_owner} expired before any side effect; safe to run again"
        batch.transition(job, attempt, **common, kind=EventKind.LEASE_EXPIRED_RECLAIMED,
                         execution_state=Execution.FAILED, error=note, note=note)
        return batch.open_next_attempt(job, attempt, actor=actor, actor_type=actor_type, dispatch=dispatch)


def first_look(job: Job) -> dict:
    """The job fields that schedule the reconciler's first look at an attempt becoming unknown now
    (locked `job`, with the database clock): not before its action's `first_look_after`."""
    action = declared_action(job.action)
    if action is None or not action.first_look_after:
        return {}
    return {"next_check_at": job.db_now + action.first_look_after}
