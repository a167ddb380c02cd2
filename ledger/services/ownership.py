"""Who is on a job: an operator takes it ("I'm on it") and releases it. Taking over or releasing
a colleague's hold must be asked for explicitly (the console asks first).

A hold is a note to colleagues, not a lock: it changes no state of the job or its attempts (so
it never makes anyone's decision stale), but deciding on a job someone else holds asks that
person's colleague to confirm first (`reconciliation.decisions`). Taking and releasing are
events in the job's history, written with the change in one transaction under the job lock.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import DurationField, Expression, Value

from ledger.models import Job
from ledger.services.errors import LedgerError
from ledger.services.transitions import Batch, ClockTimestamp, latest_attempt, lock_job
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
        reason = note.strip()[:500] if isinstance(note, str) else ""
        if job.holder == holder and not reason:
            return job
        # The holder again, with a reason: what they are doing now, and the hold starts again.
        previous = job.holder if job.holder != holder else ""
        if previous and not take_over:
            raise HeldByAnother(f"{previous} is already on job {job_id}", holder=previous, held_since=job.held_since)
        with Batch() as batch:
            batch.update_job(job, holder=holder, held_since=job.db_now)
            batch.record_unchanged(
                job, latest_attempt(job), actor_type=ActorType.OPERATOR, actor=holder, kind=EventKind.JOB_TAKEN,
                note=reason or (f"took the job over from {previous}" if previous else "on it"),
                evidence={"holder": holder, **({"taken_from": previous} if previous else {}),
                          **({"reason": reason} if reason else {})},
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


def end_holds(*, holder: str = "", held_before: datetime | Expression | None = None, note: str) -> int:
    """End holds that outlived what they were for: every hold of `holder` (their shift ended: they
    signed out), or every hold taken before `held_before` (the bound). Each job is released in its
    own transaction under its lock, with its event; a hold that changed meanwhile (taken over,
    released) is left as it is. Returns how many holds ended."""
    if not holder and held_before is None:
        raise LedgerError("say whose holds end, or before when they were taken")
    held = Job.objects.exclude(holder="")
    if holder:
        held = held.filter(holder=holder)
    if held_before is not None:
        held = held.filter(held_since__lt=held_before)
    ended = 0
    for job_id, was_holder, since in held.values_list("job_id", "holder", "held_since"):
        with transaction.atomic():
            job = lock_job(job_id=job_id)
            if (job.holder, job.held_since) != (was_holder, since):
                continue
            with Batch() as batch:
                batch.update_job(job, holder="", held_since=None)
                batch.record_unchanged(
                    job, latest_attempt(job), actor_type=ActorType.OPERATOR if holder else ActorType.SYSTEM,
                    actor=holder or "hold-expiry", kind=EventKind.JOB_RELEASED, note=note,
                    evidence={"released_from": was_holder, "held_since": since.isoformat()},
                )
            ended += 1
    return ended


def end_stale_holds() -> int:
    """Holds taken longer than RECKON_HOLD_MAX_HOURS ago end, by the database clock (0: holds end
    only when released or when their holder signs out)."""
    hours = settings.RECKON_HOLD_MAX_HOURS
    if not hours:
        return 0
    bound = ClockTimestamp() - Value(timedelta(hours=hours), output_field=DurationField())
    return end_holds(held_before=bound,
                     note=f"released: held longer than {hours:g} h (RECKON_HOLD_MAX_HOURS) without being taken again")
