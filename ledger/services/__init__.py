"""The transition layer: the only code that changes a job or an attempt.

Every function is atomic, takes the job's row lock first (so one job's changes are serial and
never deadlock), and writes its LedgerEvent in the same transaction as the change. Refusals
(a duplicate delivery, a late write) are recorded too: the event is committed, then the caller
gets a clear exception.
"""

from ledger.services.batch import Batch as Batch  # set-based transitions (reconciliation)
from ledger.services.core import (
    ClaimRefused,
    ClockTimestamp,
    GateClosed,
    IdentityMismatch,
    InvalidJob,
    JobConflict,
    Lease,
    LedgerError,
    StaleLease,
    open_next_attempt,
)
from ledger.services.decisions import (
    DecisionRefused,
    StaleDecision,
    allowed_decisions,
    cancel_job,
    confirm_effect,
    escalate,
    mark_not_found,
    retry_reconciliation,
)
from ledger.services.jobs import enqueue_job, idempotency_key_for
from ledger.services.sweeper import SweepResult, sweep_expired_leases
from ledger.services.worker import (
    begin_side_effect,
    claim_job,
    record_failure,
    record_success,
    record_unknown,
    renew_lease,
    verify_identity,
)

__all__ = [
    "ClaimRefused",
    "ClockTimestamp",
    "GateClosed",
    "DecisionRefused",
    "StaleDecision",
    "IdentityMismatch",
    "InvalidJob",
    "JobConflict",
    "Lease",
    "LedgerError",
    "StaleLease",
    "SweepResult",
    "allowed_decisions",
    "begin_side_effect",
    "cancel_job",
    "claim_job",
    "confirm_effect",
    "enqueue_job",
    "escalate",
    "idempotency_key_for",
    "mark_not_found",
    "open_next_attempt",
    "record_failure",
    "record_success",
    "record_unknown",
    "renew_lease",
    "retry_reconciliation",
    "sweep_expired_leases",
    "verify_identity",
]
