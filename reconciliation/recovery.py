"""After the ledger is restored from a backup: hold every unfinished job until reconciliation
has looked it up at the provider (`manage.py recover`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.db import transaction
from django.db.models import Max

from ledger.models import Job, LedgerEvent
from ledger.services import Batch, latest_attempt, lock_job
from ledger.states import FINISHED_JOB, ActorType, EventKind


@dataclass(frozen=True)
class Recovery:
    backup_point: object
    held: list[str]  # unfinished jobs now under recovery
    finished_in_window: list[str]  # touched near the backup point, but already finished


def hold_for_recovery(*, window_minutes: int, actor: str = "recover") -> Recovery:
    """Every unfinished job must be reconciled before any new side effect.

    Finished jobs stay finished (the restored ledger saw them finish, and a finished job never
    starts another effect); they are reported when they were touched within the window.
    """
    backup_point = LedgerEvent.objects.aggregate(newest=Max("at"))["newest"]
    if backup_point is None:
        return Recovery(None, [], [])
    since = backup_point - timedelta(minutes=window_minutes)
    touched = set(
        Job.objects.filter(events__at__gte=since, status__in=FINISHED_JOB).values_list("job_id", flat=True)
    )
    unfinished = list(
        Job.objects.exclude(status__in=FINISHED_JOB).order_by("pk").values_list("job_id", flat=True)
    )
    held = []
    for job_id in unfinished:
        with transaction.atomic():
            job = lock_job(job_id=job_id)
            if job.status in FINISHED_JOB:
                continue
            with Batch() as batch:
                batch.update_job(job, recovery_pending=True, next_check_at=None, check_count=0)
                batch.record_unchanged(
                    job,
                    latest_attempt(job),
                    actor_type=ActorType.SYSTEM,
                    actor=actor,
                    kind=EventKind.RECOVERY_STARTED,
                    note=(
                        "the ledger was restored from a backup: no new side effect of this job until "
                        "reconciliation has looked it up at the provider"
                    ),
                    evidence={"backup_point": backup_point.isoformat(), "window_minutes": window_minutes},
                )
            held.append(job_id)
    return Recovery(backup_point, held, sorted(touched))
