"""What every chaos run must show, checked from outside the worker that was killed."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from django.db import connection, connections

from ledger.invariants import find_violations
from ledger.models import Job
from ledger.services import sweep_expired_leases
from ledger.states import JobStatus

SETTLED = {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.NEEDS_OPERATOR,
           JobStatus.ESCALATED, JobStatus.AWAITING_APPROVAL, JobStatus.BLOCKED}


@dataclass
class RunResult:
    scenario: str
    run: int
    seed: int
    jobs: int = 0
    duplicate_effects: int = 0
    lost_jobs: int = 0
    stale_writes_accepted: int = 0
    ledger_violations: int = 0
    recover_seconds: float = 0.0
    expectations: list[str] = field(default_factory=list)  # scenario-specific failures
    figures: dict = field(default_factory=dict)  # what a scenario counted (kills, unknowns...), by name
    error: str = ""

    @property
    def passed(self) -> bool:
        return not (self.duplicate_effects or self.lost_jobs or self.stale_writes_accepted
                    or self.ledger_violations or self.expectations or self.error)


def reconcile_pass() -> None:
    """One pass of the real reconciler, when the reconciliation engine is installed."""
    try:
        from reconciliation.tasks import reconcile_until_idle
    except ImportError:
        return
    reconcile_until_idle()


def recover(job_ids: list[str], *, timeout: float) -> float:
    """Run the system's own recovery (sweeper, reconciler) until every job has settled."""
    started = time.monotonic()
    while True:
        try:
            sweep_expired_leases()
            reconcile_pass()
            statuses = set(Job.objects.filter(job_id__in=job_ids).values_list("status", flat=True))
            if statuses <= SETTLED:
                return time.monotonic() - started
        except Exception:
            connections.close_all()  # the database may be restarting
        if time.monotonic() - started > timeout:
            return time.monotonic() - started
        time.sleep(0.2)  # recovery pacing, bounded by timeout


def evaluate(result: RunResult, job_ids: list[str], sandbox, count_effects=None) -> RunResult:
    """`count_effects(job)`: the effects the provider holds for a job (default: the HTTP sandbox's, by
    the job's marker; a scenario with another provider, the SMTP sandbox, counts its own)."""
    jobs = list(Job.objects.filter(job_id__in=job_ids))
    result.jobs = len(jobs)
    result.lost_jobs = len(job_ids) - len(jobs) + sum(1 for job in jobs if job.status not in SETTLED)
    for job in jobs:
        effects = (count_effects(job) if count_effects is not None
                   else sandbox.effects(marker=job.idempotency_key)["count"])
        result.duplicate_effects += max(0, effects - 1)
        if job.status == JobStatus.SUCCEEDED and effects != 1:
            result.expectations.append(f"{job.job_id} succeeded with {effects} effects at the provider")
    result.stale_writes_accepted = stale_writes_accepted(job_ids)
    result.ledger_violations = sum(f.count for f in find_violations())
    return result


def stale_writes_accepted(job_ids: list[str]) -> int:
    """Worker writes that took effect without holding the attempt's current lease.

    A worker's state-changing event must come from the attempt's lease owner, and before any
    later attempt of the job was claimed.
    """
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT count(*) FROM ledger_ledgerevent e
            JOIN ledger_attempt a ON a.id = e.attempt_id
            JOIN ledger_job j ON j.id = e.job_id
            WHERE j.job_id = ANY(%s) AND e.actor_type = 'worker'
              AND e.kind IN ('side_effect_started', 'succeeded', 'failed', 'observation_lost',
                             'identity_verified', 'identity_mismatch')
              AND (e.actor <> a.lease_owner OR EXISTS (
                    SELECT 1 FROM ledger_ledgerevent later JOIN ledger_attempt la ON la.id = later.attempt_id
                    WHERE later.job_id = e.job_id AND later.kind = 'claimed' AND la.number > a.number
                      AND later.id < e.id))
            """,
            [job_ids],
        )
        return cursor.fetchone()[0]


def event_count(job_id: str, kind: str) -> int:
    return Job.objects.get(job_id=job_id).events.filter(kind=kind).count()
