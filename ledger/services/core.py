"""The mechanics every transition shares: the job lock, the CAS update, the event.

Only modules of the transition layer (ledger.services.*, reconciliation.services,
approvals.services) may call these; everything else calls the public service functions.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.db.models import DateTimeField, Func

from ledger.models import Attempt, Job, LedgerEvent


class LedgerError(Exception):
    """A refused operation. The ledger is unchanged except for the event recording the refusal."""


class InvalidJob(LedgerError):
    pass


class JobConflict(LedgerError):
    pass


class ClaimRefused(LedgerError):
    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


class StaleLease(LedgerError):
    """A write by a worker whose lease is no longer the current one: rejected and recorded."""


class IdentityMismatch(LedgerError):
    pass


class GateClosed(LedgerError):
    """The dead-man gate holds irreversible side effects; the attempt went back to the queue."""


class ClockTimestamp(Func):
    """The database clock, advancing within a transaction (unlike now())."""

    template = "clock_timestamp()"
    output_field = DateTimeField()


@dataclass(frozen=True)
class Lease:
    job_id: str
    attempt_id: int
    attempt_number: int
    owner: str
    token: int
    expires_at: datetime


def lock_job(*, job_id: str, skip_locked: bool = False) -> Job | None:
    query = Job.objects.select_for_update(skip_locked=skip_locked).annotate(db_now=ClockTimestamp())
    if skip_locked:
        return query.filter(job_id=job_id).first()
    try:
        return query.get(job_id=job_id)
    except Job.DoesNotExist:
        raise LedgerError(f"no job with id {job_id!r}") from None


def latest_attempt(job: Job) -> Attempt:
    return Attempt.objects.filter(job=job).order_by("-number").first()


def transition(job: Job, attempt: Attempt, **change) -> LedgerEvent:
    """Change the attempt (compare-and-set on its version) and the job, and record the event.

    The rules live in `Batch.transition` (the set-based form reconciliation uses for many
    jobs); a single change is a batch of one, written now.
    """
    from ledger.services.batch import Batch

    batch = Batch()
    event = batch.transition(job, attempt, **change)
    batch.flush()
    return event


def set_job_status(job: Job, status: str, **fields) -> None:
    """One UPDATE of the job's status and any other job fields changing with it (a batch of one)."""
    from ledger.services.batch import Batch

    batch = Batch()
    batch.set_job_status(job, status, **fields)
    batch.flush()


def trigger_reconciliation() -> None:
    """Run a reconciliation pass soon after this commit (the schedule only fires each minute)."""
    if settings.RECKON_DISPATCH:
        transaction.on_commit(_enqueue_reconciliation)


def _enqueue_reconciliation() -> None:
    from django_q.tasks import async_task

    async_task("reconciliation.tasks.reconcile_due_jobs", task_name="reconcile_due_jobs")


def snapshot(job: Job, attempt: Attempt | None) -> dict:
    snapshot = {"job": job.status}
    if attempt is not None:
        snapshot |= {"attempt": attempt.number, **attempt.states}
    return snapshot


def record_event(
    job: Job,
    attempt: Attempt | None,
    *,
    actor_type: str,
    actor: str,
    kind: str,
    before: dict,
    after: dict,
    note: str = "",
    evidence: dict | None = None,
) -> LedgerEvent:
    return LedgerEvent.objects.create(
        job=job,
        attempt=attempt,
        actor_type=actor_type,
        actor=actor[:200],
        kind=kind,
        before=before,
        after=after,
        note=note,
        evidence=evidence or {},
    )


def record_unchanged(job: Job, attempt: Attempt | None, **event) -> LedgerEvent:
    """An event that changes nothing (a refusal, a signal, a note): before and after are the same."""
    state = snapshot(job, attempt)
    return record_event(job, attempt, before=state, after=state, **event)


def dispatch_run(job: Job) -> None:
    """Hand the job to a django-q2 worker once this transaction has committed."""
    if settings.RECKON_DISPATCH:
        job_id = job.job_id
        transaction.on_commit(lambda: _enqueue_run(job_id))


def _enqueue_run(job_id: str, **options) -> None:
    from django_q.tasks import async_task

    async_task("ledger.tasks.run_job", job_id, task_name=f"run_job:{job_id}"[:100], **options)


def open_next_attempt(
    job: Job, previous: Attempt, *, actor: str, actor_type: str, note: str = "", dispatch: bool = True
) -> Attempt | None:
    """Queue the next attempt with the same idempotency key, or fail the job when none is left.

    The caller holds the job lock and has already closed `previous` (no live attempt remains).
    The new attempt is dispatched to a worker as this transaction commits, unless the caller
    leases it itself. The rules live in `Batch.open_next_attempt`, which applies them to many jobs.
    """
    from ledger.services.batch import Batch  # the set-based form; a batch of one here

    batch = Batch()
    attempt = batch.open_next_attempt(
        job, previous, actor=actor, actor_type=actor_type, note=note, dispatch=dispatch
    )
    batch.flush()
    return attempt
