"""Claiming the next job: "give me work", for workers that do not know a job id (over HTTP).

`claim_next_job` picks the oldest pending job within the given actions and tenants, locks it with
`FOR UPDATE SKIP LOCKED` (so concurrent callers never pick the same one, and never wait for each
other), and claims it by claim_job's own path, holding the lock: in the ordinary case its database
function (`reckon_claim`) in the same statement, otherwise `claim_job` itself in the same
transaction. The fencing token, the events and every refusal are exactly those of a claim by id.
What a claim refuses is never handed out: a job whose latest attempt is unknown or blocked is not
pending, a job under recovery or held by the dead-man gate is skipped, and an irreversible job the
closed gate now holds is recorded as held (`claim_refused`, `gated_at`) by the claim, after which
the next candidate is tried.
"""

from __future__ import annotations

from collections.abc import Collection

from django.db import connection, transaction

from ledger.fastpath import LEASE_COLUMNS, fetch_row, ungated_actions
from ledger.models import Job
from ledger.services.errors import ClaimRefused
from ledger.services.worker import Lease, claim_job
from ledger.states import JobStatus

# Candidates a claim may pass over (each refusal recorded) before it answers "nothing for now".
MAX_PASSED_OVER = 20

# The ordinary case in one round trip, as its own transaction: the oldest candidate, locked, and
# claimed by claim_job's own database function (reckon_claim, ledger/fastpath.py). A row with no
# lease means the function left the candidate to the Python path (the gate, for one).
ONE_ROUND_TRIP = f"""
SELECT candidate.job_id, {", ".join(f"leased.{column}" for column in LEASE_COLUMNS)}
FROM (
    SELECT job_id FROM {Job._meta.db_table}
    WHERE status = %s AND NOT recovery_pending AND gated_at IS NULL
      AND (%s::text[] IS NULL OR action = ANY(%s::text[]))
      AND (%s::text[] IS NULL OR tenant = ANY(%s::text[]))
    ORDER BY created_at, id LIMIT 1
    FOR UPDATE SKIP LOCKED
) AS candidate
LEFT JOIN LATERAL reckon_claim(candidate.job_id, %s, %s, true) AS leased ON true
"""  # nosec B608  # the table name from the model; every value is a bound parameter
DECLINED = object()


def claim_next_job(
    *, worker: str, actions: Collection[str] | None = None, tenants: Collection[str] | None = None
) -> Lease | None:
    """Lease the oldest claimable job of these actions and tenants (None: any) to `worker`, or
    return None when there is none."""
    if not connection.in_atomic_block:
        leased = _in_one_round_trip(worker, actions, tenants)
        if leased is not DECLINED:
            return leased
    passed_over: list[str] = []
    while len(passed_over) <= MAX_PASSED_OVER:
        with transaction.atomic():
            _commit_without_waiting_for_the_wal()
            job_id = _oldest_claimable(actions, tenants, passed_over)
            if job_id is None:
                return None
            try:
                return claim_job(job_id=job_id, worker=worker)
            except ClaimRefused:
                passed_over.append(job_id)  # the claim recorded why; this transaction commits it
    return None


def _in_one_round_trip(worker: str, actions, tenants):
    """A Lease; None when nothing is claimable; DECLINED when the Python path must decide."""
    actions = None if actions is None else list(actions)
    tenants = None if tenants is None else list(tenants)
    row = fetch_row(ONE_ROUND_TRIP, [JobStatus.PENDING.value, actions, actions, tenants, tenants, worker,
                                     ungated_actions()])
    if row is None:
        return None
    job_id, *leased = row
    return DECLINED if leased[0] is None else Lease(job_id, *leased)


def _oldest_claimable(actions, tenants, passed_over: list[str]) -> str | None:
    """The oldest pending job in scope that nobody else is claiming right now, row-locked."""
    pending = Job.objects.filter(status=JobStatus.PENDING, recovery_pending=False, gated_at__isnull=True)
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
