"""The transition layer: the only code that changes a job or an attempt.

Every change goes through `transitions.Batch` (for one job or many), which compare-and-sets the
attempt, updates the job and writes the change's LedgerEvent in the same transaction; the
callers take the job's row lock first (so one job's changes are serial and never deadlock).
Refusals (a duplicate delivery, a late write) are recorded too: the event is committed, then the
caller gets a clear exception.

    jobs.py         enqueue_job
    worker.py       the worker loop's steps: claim, renew, verify identity, begin, results (one function
                    per step for every caller; the ordinary case through ledger.fastpath)
    pulling.py      claim the next job in a scope (workers over HTTP that know no job id)
    claimable.py    the NOTIFY that wakes those workers when jobs become claimable
    sweeper.py      expired leases and stranded deliveries
    gate.py         the dead-man gate's release of the work it held
    ownership.py    who is on a job: take and release ("I'm on it")
    comments.py     a person's comment on a job, an event of its history
    transitions.py  Batch, locks, snapshots, dispatch to django-q2, the reconciler's claim
    bulk.py         the set-based SQL under Batch
    errors.py       what the layer refuses

How unknown work is resolved (by the reconciler or by a person) sits above the ledger, in
`reconciliation.resolution`, and calls this layer.
"""

from ledger.services.batches import Outcome, begin_side_effects, record_results
from ledger.services.bulk import insert_objects
from ledger.services.comments import CommentRefused, comment_on_job
from ledger.services.errors import (
    ClaimRefused,
    GateClosed,
    IdentityMismatch,
    InvalidJob,
    JobArchived,
    JobConflict,
    LedgerError,
    NotInScope,
    StaleLease,
)
from ledger.services.gate import complete_pass, release_gated_jobs
from ledger.services.jobs import enqueue_job, idempotency_key_for
from ledger.services.ownership import HeldByAnother, end_holds, end_stale_holds, release_job, take_job
from ledger.services.pulling import claim_next_job, claim_next_jobs
from ledger.services.sweeper import SweepResult, sweep_expired_lease, sweep_expired_leases
from ledger.services.transitions import (
    Batch,
    ClockTimestamp,
    claim_for_reconciliation,
    latest_attempt,
    latest_attempts,
    lock_job,
    lock_jobs,
    record_refusal,
    snapshot,
    trigger_reconciliation,
)
from ledger.services.worker import (
    Lease,
    begin_side_effect,
    claim_and_begin,
    claim_job,
    enqueue_claim_and_begin,
    hold_for_provider,
    identity_mismatch,
    lease_named,
    record_failure,
    record_success,
    record_unknown,
    renew_lease,
    verify_identity,
)

__all__ = [
    "Batch",
    "ClaimRefused",
    "ClockTimestamp",
    "CommentRefused",
    "GateClosed",
    "HeldByAnother",
    "IdentityMismatch",
    "InvalidJob",
    "JobArchived",
    "JobConflict",
    "Lease",
    "LedgerError",
    "NotInScope",
    "Outcome",
    "StaleLease",
    "SweepResult",
    "begin_side_effect",
    "begin_side_effects",
    "claim_and_begin",
    "enqueue_claim_and_begin",
    "claim_for_reconciliation",
    "claim_job",
    "claim_next_job",
    "claim_next_jobs",
    "comment_on_job",
    "complete_pass",
    "enqueue_job",
    "idempotency_key_for",
    "identity_mismatch",
    "insert_objects",
    "latest_attempt",
    "latest_attempts",
    "lease_named",
    "lock_job",
    "lock_jobs",
    "record_failure",
    "hold_for_provider",
    "record_results",
    "record_refusal",
    "record_success",
    "record_unknown",
    "release_gated_jobs",
    "release_job",
    "end_holds",
    "end_stale_holds",
    "renew_lease",
    "snapshot",
    "sweep_expired_lease",
    "sweep_expired_leases",
    "take_job",
    "trigger_reconciliation",
    "verify_identity",
]
