"""After the ledger is restored from a backup: hold every unfinished job until reconciliation
has looked it up at the provider, and open a recovery window in which every new key is looked up
too (`manage.py recover`; ledger.services.recovery does the holding)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.db.models import Max

from ledger.models import Job, LedgerEvent, RecoveryWindow
from ledger.services.recovery import RECOVER, hold_jobs, open_recovery_window
from ledger.states import FINISHED_JOB


@dataclass(frozen=True)
class Recovery:
    backup_point: object
    held: list[str]  # unfinished jobs now under recovery
    finished_in_window: list[str]  # touched near the backup point, but already finished
    window: RecoveryWindow | None = None  # new keys are looked up before their first side effect until it ends


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
    held = hold_jobs(
        None,
        actor=actor,
        note=(
            "the ledger was restored from a backup: no new side effect of this job until "
            "reconciliation has looked it up at the provider"
        ),
        evidence={"backup_point": backup_point.isoformat(), "window_minutes": window_minutes},
    )
    # A key the restored ledger has never seen may be one it forgot: new ones are looked up too.
    window = open_recovery_window(cause=RECOVER, actor=actor, evidence={
        "backup_point": backup_point.isoformat(), "held": len(held)})
    return Recovery(backup_point, held, sorted(touched), window)
