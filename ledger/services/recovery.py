"""Recovery after the ledger lost history: jobs held until reconciliation has looked them up at
their provider, and the recovery window in which every new key is held the same way (the job
table's trigger, ledger.recovery_window).

`manage.py recover` (after a restore, by hand) and the ledger watch (ledger.rewind, by itself)
both come here; what the reconciler then does with a held job is reconciliation's
(`reconciliation.applying`: found → confirmed, not found → released to run, not queryable → a person).
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.db.models.functions import Now
from django.utils import timezone

from ledger.models import Job, RecoveryWindow
from ledger.services.transitions import Batch, latest_attempt, lock_job
from ledger.states import FINISHED_JOB, ActorType, EventKind

ROLLBACK_DETECTED = "rollback_detected"
RECOVER = "recover"
# One detection at a time across every process (several may notice the same rollback at once).
DETECTION_LOCK = 4141
SAME_ROLLBACK_S = 60


def open_windows():
    """The recovery windows open now (by the database's clock), newest end first."""
    return RecoveryWindow.objects.filter(ended_at__isnull=True, ends_at__gt=Now()).order_by("-ends_at")


def current_window() -> RecoveryWindow | None:
    return open_windows().first()


def open_recovery_window(*, cause: str, actor: str, evidence: dict, hours: float | None = None) -> RecoveryWindow:
    """From now (the database's clock) until `hours` (RECKON_RECOVERY_LOOKUP_HOURS) from now."""
    hours = settings.RECKON_RECOVERY_LOOKUP_HOURS if hours is None else hours
    if hours <= 0:
        raise ValueError("a recovery window lasts a positive number of hours")
    return RecoveryWindow.objects.create(cause=cause, opened_by=actor[:200], evidence=evidence,
                                         ends_at=_db_now() + timedelta(hours=hours))


def end_recovery_windows(*, actor: str, note: str) -> list[RecoveryWindow]:
    """A person ends every open window early (jobs held already stay held until looked up)."""
    if not note.strip():
        raise ValueError("ending a recovery window early takes a note saying why")
    with transaction.atomic():
        windows = list(open_windows().select_for_update())
        for window in windows:
            window.ended_at, window.ended_by, window.end_note = Now(), actor[:150], note.strip()
            window.save(update_fields=["ended_at", "ended_by", "end_note"])
    return windows


def hold_jobs(job_ids, *, actor: str, note: str, evidence: dict, again: bool = True) -> list[str]:
    """Hold each unfinished job of `job_ids` (None: every unfinished job) until reconciliation has
    looked it up: no new side effect before. Finished jobs stay finished (a finished job never
    starts another effect); `again=False` leaves a job already held as it is. The job ids held,
    each with its `recovery_started` event."""
    unfinished = Job.objects.exclude(status__in=FINISHED_JOB)
    if not again:
        unfinished = unfinished.exclude(recovery_pending=True)
    if job_ids is not None:
        unfinished = unfinished.filter(job_id__in=list(job_ids))
    held = []
    for job_id in unfinished.order_by("pk").values_list("job_id", flat=True):
        with transaction.atomic():
            job = lock_job(job_id=job_id)
            if job is None or job.status in FINISHED_JOB:
                continue
            with Batch() as batch:
                batch.update_job(job, recovery_pending=True, next_check_at=None, check_count=0)
                batch.record_unchanged(job, latest_attempt(job), actor_type=ActorType.SYSTEM, actor=actor,
                                       kind=EventKind.RECOVERY_STARTED, note=note, evidence=evidence)
            held.append(job_id)
    return held


def enter_recovery(*, actor: str, lost: dict, touched: list[str] | None) -> RecoveryWindow:
    """The ledger was found to have lost history (ledger.rewind): open a recovery window and hold
    every job seen touched in the lost window that the ledger still has (`touched`; None: the lost
    window reaches beyond what was remembered, so every unfinished job)."""
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [DETECTION_LOCK])
        present = (list(Job.objects.filter(job_id__in=touched).values_list("job_id", flat=True))
                   if touched is not None else None)
        forgotten = sorted(set(touched or ()) - set(present or ()))
        evidence = {**lost, "touched_in_lost_window": None if touched is None else len(touched),
                    "forgotten_jobs": len(forgotten), "forgotten_sample": forgotten[:20]}
        # The same rollback seen from another host a moment later: one window, its jobs held once.
        window = open_windows().filter(cause=ROLLBACK_DETECTED,
                                       opened_at__gte=Now() - timedelta(seconds=SAME_ROLLBACK_S)).first()
        if window is None:
            window = open_recovery_window(cause=ROLLBACK_DETECTED, actor=actor, evidence=evidence)
        else:
            evidence = {**window.evidence, "seen_again_by": actor, "held_before": window.evidence.get("held", 0)}
        held = hold_jobs(present, again=False, actor=actor,
                         evidence={"cause": ROLLBACK_DETECTED, "window": window.pk, **lost},
                         note=("the ledger lost history it had acknowledged (a restore, a failover that lost its "
                               "tail): no new side effect of this job until reconciliation has looked it up"))
        window.evidence = {**evidence, "held": len(held) + evidence.get("held_before", 0)}
        window.save(update_fields=["evidence"])
    return window


def recovery_summary() -> dict:
    """What the overview and /metrics say: the open window, and the jobs still held."""
    window = current_window()
    held = Job.objects.filter(Q(recovery_pending=True) & ~Q(status__in=FINISHED_JOB)).count()
    return {"window": window, "held": held}


def _db_now():
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement_timestamp()")
        return cursor.fetchone()[0] or timezone.now()
