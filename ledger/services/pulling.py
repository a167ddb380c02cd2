"""Claiming the next job: "give me work", for workers that do not know a job id (over HTTP).

`claim_next_job` picks the oldest pending job within the given actions and tenants, locks it with
`FOR UPDATE SKIP LOCKED` (so concurrent callers never pick the same one, and never wait for each
other), and claims it by claim_job's own path, holding the lock: in the ordinary case its database
function (`reckon_claim`) in the same statement, otherwise `claim_job` itself in the same
transaction. `claim_next_jobs` does the same for up to N jobs in one statement (a batched worker);
`claim_next_job` is that door with N = 1. The fencing token, the events and every refusal are exactly those of a claim by id.
What a claim refuses is never handed out: a job whose latest attempt is unknown or blocked is not
pending, a job under recovery or held by the dead-man gate is skipped, and an irreversible job the
closed gate now holds is recorded as held (`claim_refused`, `gated_at`) by the claim, after which
the next candidate is tried.
"""

from __future__ import annotations

from collections.abc import Collection

from django.db import connection, transaction

from ledger import fastpath
from ledger.models import CLAIMABLE, Job
from ledger.scope import Scope
from ledger.services.errors import ClaimRefused
from ledger.services.worker import Lease, claim_job

# Candidates a claim may pass over (each refusal recorded) before it answers "nothing for now".
MAX_PASSED_OVER = 20

def claim_next_job(
    *, worker: str, actions: Collection[str] | None = None, tenants: Collection[str] | None = None
) -> Lease | None:
    """Lease the oldest claimable job of these actions and tenants (None: any) to `worker`, or
    return None when there is none."""
    leases = claim_next_jobs(worker=worker, limit=1, actions=actions, tenants=tenants)
    return leases[0] if leases else None


def claim_next_jobs(
    *, worker: str, limit: int, actions: Collection[str] | None = None, tenants: Collection[str] | None = None
) -> list[Lease]:
    """Lease up to `limit` of the oldest claimable jobs of these actions and tenants to `worker`,
    oldest first, each as claim_next_job leases one (its own fencing token and events): in the
    ordinary case all in one statement (reckon_claim_many, ledger.fastpath.claim_next); jobs the
    function declines go through claim_job one by one, which records any refusal."""
    if limit < 1:
        return []
    leases: list[Lease] = []
    if not connection.in_atomic_block:
        claimed, declined = fastpath.claim_next(worker=worker, limit=limit, scope=Scope(tenants=tenants, actions=actions))
        leases = [Lease(job.job_id, *leased, job=job) for job, leased in claimed]
        if not declined:
            return leases
    return leases + _claimed_one_by_one(worker, actions, tenants, limit=limit - len(leases))


def _claimed_one_by_one(worker: str, actions, tenants, *, limit: int) -> list[Lease]:
    """Up to `limit` leases by claim_job, each in its own transaction holding the job's row lock;
    a refused candidate is passed over (its refusal recorded) for the next."""
    leases: list[Lease] = []
    passed_over: list[str] = []
    while len(leases) < limit and len(passed_over) <= MAX_PASSED_OVER:
        with transaction.atomic():
            _commit_without_waiting_for_the_wal()
            job_id = _oldest_claimable(actions, tenants, passed_over)
            if job_id is None:
                break
            try:
                leases.append(claim_job(job_id=job_id, worker=worker))
            except ClaimRefused:
                passed_over.append(job_id)  # the claim recorded why; this transaction commits it
    return leases


def _oldest_claimable(actions, tenants, passed_over: list[str]) -> str | None:
    """The oldest pending job in scope that nobody else is claiming right now, row-locked."""
    pending = Job.objects.filter(CLAIMABLE)
    if actions is not None:
        pending = pending.filter(action__in=list(actions))
    if tenants is not None:
        pending = pending.filter(tenant__in=list(tenants))
    if passed_over:
        pending = pending.exclude(job_id__in=passed_over)
    return (
        pending.select_for_update(skip_locked=True)
        .order_by("created_at", "pk")
        .values_list("job_id", flat=True)
        .first()
    )


def _commit_without_waiting_for_the_wal() -> None:
    """This transaction is a claim (and the refusals met on the way), like a claim by id that is its
    own transaction (see ledger/fastpath.py): a crash that loses it is caught by the next step's
    compare-and-set, and begin_side_effect's synchronous commit makes it durable first."""
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL synchronous_commit = off")
