"""Reckon's periodic work, declared in one place and written into django-q2's schedule table
after every `migrate` (see config/apps.py).

django-q2's scheduler fires at most once a minute, on whichever cluster checks first. What must
happen more often has another trigger as well: the lease sweeper runs as its own loop
(`sweep_leases --loop`, every few seconds), and a reconciliation pass is enqueued as soon as a job
becomes unknown (and by `reconcile --loop`). The schedules below are the safety net that keeps
running on any host with a cluster.
"""

from __future__ import annotations

from dataclasses import dataclass

from alerts.tasks import evaluate_alerts, sample_history
from approvals.tasks import expire_due_approvals
from ledger.cluster import SCHEDULE_PREFIX
from ledger.tasks import create_partitions_ahead, end_stale_holds, sweep_expired_leases
from reconciliation.tasks import reconcile_until_idle

PREFIX = SCHEDULE_PREFIX


@dataclass(frozen=True)
class Every:
    """A task run every `minutes` minutes, forever."""

    task: object
    minutes: int = 1

    @property
    def name(self) -> str:
        return PREFIX + self.task.__name__

    @property
    def func(self) -> str:
        return f"{self.task.__module__}.{self.task.__qualname__}"


SCHEDULES = (
    Every(sweep_expired_leases),  # expired leases: reclaim, or mark unknown
    Every(reconcile_until_idle),  # unknown work: ask the providers
    Every(expire_due_approvals),  # approval requests past their time: back to an operator
    Every(sample_history),  # what the overview's charts draw: levels sampled, events counted per hour
    Every(evaluate_alerts),  # notify when an alert condition starts or clears
    Every(end_stale_holds),  # "I'm on it" holds older than RECKON_HOLD_MAX_HOURS end
    Every(create_partitions_ahead, minutes=60),  # the history's partitions, created ahead of time
)


def sync_schedules(using: str = "default") -> None:
    """Make django-q2's schedule table hold exactly the schedules declared here (by name), keeping
    each one's next run; Reckon's schedules that are no longer declared are removed."""
    from django_q.models import Schedule

    declared = {schedule.name: schedule for schedule in SCHEDULES}
    Schedule.objects.using(using).filter(name__startswith=PREFIX).exclude(name__in=declared).delete()
    for name, schedule in declared.items():
        Schedule.objects.using(using).update_or_create(
            name=name,
            defaults={"func": schedule.func, "schedule_type": Schedule.MINUTES, "minutes": schedule.minutes,
                      "repeats": -1},
        )

