"""Who is on a job: an operator takes it ("I'm on it") and releases it. Taking over or releasing
a colleague's hold must be asked for explicitly (the console asks first).

A hold is a note to colleagues, not a lock: it changes no state of the job or its attempts (so
it never makes anyone's decision stale), but deciding on a job someone else holds asks that
person's colleague to confirm first (`reconciliation.decisions`). Taking and releasing are
events in the job's history, written with the change in one transaction under the job lock.
"""

from __future__ import annotations

from datetime import datetime

from django.db import transaction

from ledger.models import Job
from ledger.services.errors import LedgerError
from ledger.services.transitions import Batch, latest_attempt, lock_job
from ledger.states import FINISHED_JOB, ActorType, EventKind


class HeldByAnother(LedgerError):
    """Someone else holds the job; the caller must say it takes over."""

    def __init__(self, message: str, *, holder: str, held_since: datetime):
        super().__init__(message)
        self.holder, self.held_since = holder, held_since


def take_job(*, job_id: str, holder: str, take_over: bool = False, note: str = "") -> Job:
    """`holder` is on the job from now on. Someone else's hold is taken over only when asked
    (`take_over`), and the event names whom it was taken from."""
    with transaction.atomic():
        job = lock_job(job_id=job_id)
        if job.status in FINISHED_JOB:
            raise LedgerError(f"job {job_id} is already {job.status}: there is nothing left to be on")
        if job.holder == holder:
            return job
        previous = job.holder
        if previous and not take_over:
            raise HeldByAnother(f"{previous} is already on job {job_id}", holder=previous, held_since=job.held_since)
        with Batch() as batch:
            batch.update_job(job, holder=holder, held_since=job.db_now)
            batch.record_unchanged(
                job, latest_attempt(job), actor_type=ActorType.OPERATOR, actor=holder, kind=EventKind.JOB_TAKEN,
                note=note or (f"took the job over from {previous}" if previous else "on it"),
                evidence={"holder": holder, **({"taken_from": previous} if previous else {})},
            )
    return job


def release_job(*, job_id: str, actor: str, release_other: bool = False, note: str = "") -> Job:
    """Nobody holds the job any more. Releasing a job nobody holds changes nothing; someone
    else's hold is released only when asked (`release_other`), as taking over is."""
    with transaction.atomic():
        job = lock_job(job_id=job_id)
        previous = job.holder
        if not previous:
            return job
        if previous != actor and not release_other:
            raise HeldByAnother(f"{previous} is on job {job_id}", holder=previous, held_since=job.held_since)
        with Batch() as batch:
            batch.update_job(job, holder="", held_since=None)
            batch.record_unchanged(
                job, latest_attempt(job), actor_type=ActorType.OPERATOR, actor=actor, kind=EventKind.JOB_RELEASED,
                note=note or ("released" if actor == previous else f"released {previous}'s hold"),
                evidence={"released_from": previous},
            )
    return job
