"""The dead-man gate's one change of state: when a loop's pass reopens it, the jobs it held are
dispatched again (`gated_at` cleared, a `gate_released` event each)."""

from __future__ import annotations

from django.db import transaction

from ledger.gate import gate_status, record_pass
from ledger.models import Job
from ledger.services.transitions import Batch, latest_attempts
from ledger.states import ActorType, EventKind


def complete_pass(name: str) -> None:
    """A loop (the sweeper, the reconciler) completed a pass. If that reopens the gate, the jobs
    it held back go to the workers again."""
    record_pass(name)
    if Job.objects.filter(gated_at__isnull=False).exists() and gate_status().open:
        release_gated_jobs(actor=name)


def release_gated_jobs(*, actor: str = "dead-man-gate") -> int:
    with transaction.atomic():
        jobs = list(
            Job.objects.select_for_update(skip_locked=True).filter(gated_at__isnull=False).order_by("pk")
        )
        attempts = latest_attempts(jobs)
        with Batch() as batch:
            for job in jobs:
                held_since = job.gated_at
                batch.update_job(job, gated_at=None)
                batch.record_unchanged(
                    job, attempts.get(job.pk), actor_type=ActorType.SYSTEM, actor=actor,
                    kind=EventKind.GATE_RELEASED,
                    note="the dead-man gate reopened: the held job goes to the workers again",
                    evidence={"held_since": held_since.isoformat()},
                )
                batch.dispatch_run(job)
    return len(jobs)
