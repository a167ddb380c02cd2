"""Is a django-q2 cluster running? Read from its schedule table, which every host can see.

Every deployment needs one, external-only actions included: approval expiry, alert evaluation and
the overview's sampling run only in a cluster (config/schedules.py). A cluster's scheduler looks
every 30 s and runs what is due, so a schedule of Reckon's past due by minutes means none is up:
the sweeper loop says so when it starts and when it ends, and `check --deploy` reports it.
"""

from __future__ import annotations

from datetime import datetime, timedelta

# Reckon's schedules are named with this prefix (config/schedules.py).
SCHEDULE_PREFIX = "reckon."
# A schedule due longer ago than this has not been run.
OVERDUE_AFTER = timedelta(minutes=3)


def cluster_problem(*, now: datetime | None = None) -> str | None:
    """Why this deployment has no qcluster running, or None."""
    from django.db import DatabaseError
    from django.utils import timezone
    from django_q.models import Schedule

    now = now or timezone.now()
    try:
        overdue = list(Schedule.objects.filter(name__startswith=SCHEDULE_PREFIX, next_run__lt=now - OVERDUE_AFTER)
                       .order_by("next_run").values_list("name", "next_run"))
    except DatabaseError:  # not migrated yet: nothing is scheduled, nothing is late
        return None
    if not overdue:
        return None
    minutes = int((now - overdue[0][1]).total_seconds() // 60)
    return (f"no qcluster has run Reckon's schedules for {minutes} minutes ({', '.join(n for n, _ in overdue)} "
            "overdue): approval expiry, alerts and the overview's sampling run only in a cluster. Start "
            "`reckon qcluster` (manage.py qcluster) on at least one host, whatever runs your actions.")
