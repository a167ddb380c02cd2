"""The three ledgers of an attempt, the job's summary status, and the rules that tie them.

One place for the vocabulary: models build their CHECK constraints from it, services and
`ledger_check` read the same rules.
"""

from django.db import models


class Delivery(models.TextChoices):
    QUEUED = "queued"
    LEASED = "leased"
    ACKNOWLEDGED = "acknowledged"
    DEAD_LETTERED = "dead_lettered"


class Execution(models.TextChoices):
    NOT_STARTED = "not_started"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    UNKNOWN = "unknown"
    BLOCKED = "blocked"


class SideEffect(models.TextChoices):
    NOT_ATTEMPTED = "not_attempted"
    SUBMITTED = "submitted"
    CONFIRMED = "confirmed"
    AMBIGUOUS = "ambiguous"
    NOT_FOUND = "not_found"


class JobStatus(models.TextChoices):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    NEEDS_RECONCILIATION = "needs_reconciliation"
    NEEDS_OPERATOR = "needs_operator"
    ESCALATED = "escalated"
    AWAITING_APPROVAL = "awaiting_approval"
    BLOCKED = "blocked"
    CANCELLED = "cancelled"


class ActorType(models.TextChoices):
    WORKER = "worker"
    RECONCILER = "reconciler"
    OPERATOR = "operator"
    APPROVER = "approver"
    SYSTEM = "system"


class EventKind(models.TextChoices):
    """Every kind of LedgerEvent, grouped by who writes it. The audit page filters by these,
    the metrics count them, and the fast path's database functions write three of them."""

    # enqueueing
    ENQUEUED = "enqueued"
    ENQUEUE_REPEATED = "enqueue_repeated"
    # the worker loop
    CLAIMED = "claimed"
    CLAIM_REFUSED = "claim_refused"
    DUPLICATE_DELIVERY = "duplicate_delivery"
    LEASE_RENEWED = "lease_renewed"
    IDENTITY_VERIFIED = "identity_verified"
    IDENTITY_MISMATCH = "identity_mismatch"
    SIDE_EFFECT_STARTED = "side_effect_started"
    SIDE_EFFECT_HELD = "side_effect_held"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    OBSERVATION_LOST = "observation_lost"
    LATE_WRITE_REJECTED = "late_write_rejected"
    # the lease sweeper and the dead-man gate
    LEASE_EXPIRED_RECLAIMED = "lease_expired_reclaimed"
    LEASE_EXPIRED_UNKNOWN = "lease_expired_unknown"
    REDISPATCHED = "redispatched"
    GATE_RELEASED = "gate_released"
    # attempts
    ATTEMPT_OPENED = "attempt_opened"
    ATTEMPTS_EXHAUSTED = "attempts_exhausted"
    # the reconciler
    RECONCILED_CONFIRMED = "reconciled_confirmed"
    RECONCILED_NOT_FOUND = "reconciled_not_found"
    RECONCILED_CONFLICT = "reconciled_conflict"
    RECONCILIATION_UNAVAILABLE = "reconciliation_unavailable"
    RECONCILIATION_GAVE_UP = "reconciliation_gave_up"
    RECONCILIATION_ANSWER_REFUSED = "reconciliation_answer_refused"  # in older histories; now counted on the token
    NOT_QUERYABLE = "not_queryable"
    # recovery after a restore
    RECOVERY_STARTED = "recovery_started"
    RECOVERY_RELEASED = "recovery_released"
    # operators
    OPERATOR_CONFIRMED_EFFECT = "operator_confirmed_effect"
    OPERATOR_MARKED_NOT_FOUND = "operator_marked_not_found"
    OPERATOR_ESCALATED = "operator_escalated"
    OPERATOR_RETRIED_RECONCILIATION = "operator_retried_reconciliation"
    OPERATOR_CANCELLED = "operator_cancelled"
    OPERATOR_RECHECKED_IDENTITY = "operator_rechecked_identity"  # a blocked attempt's binding, looked at again
    OPERATOR_REPLAYED_BLOCKED = "operator_replayed_blocked"  # nothing was sent and the binding now matches
    OPERATOR_CORRECTED_PAYLOAD = "operator_corrected_payload"  # a failed job's payload, before and after
    OPERATOR_RETRIED_FAILED = "operator_retried_failed"  # one more attempt for a failed job, same key
    OPERATOR_CLOSED_FAILED = "operator_closed_failed"  # the failure stands: no more attempts
    JOB_TAKEN = "job_taken"  # "I'm on it": the job has a holder
    JOB_RELEASED = "job_released"
    JOB_COMMENTED = "job_commented"  # a person's remark: no state change, kept in the history
    # approvals
    APPROVAL_REQUESTED = "approval_requested"
    APPROVAL_GRANTED = "approval_granted"
    APPROVAL_REJECTED = "approval_rejected"
    APPROVAL_WITHDRAWN = "approval_withdrawn"
    APPROVAL_EXPIRED = "approval_expired"


# An attempt that still holds the job: at most one per job (a partial unique index).
LIVE_EXECUTION = (Execution.NOT_STARTED, Execution.RUNNING, Execution.UNKNOWN, Execution.BLOCKED)

# The unknown-work queue: jobs that need reconciliation or a human.
UNKNOWN_WORK = (
    JobStatus.NEEDS_RECONCILIATION,
    JobStatus.NEEDS_OPERATOR,
    JobStatus.ESCALATED,
    JobStatus.AWAITING_APPROVAL,
    JobStatus.BLOCKED,
)

# The unknown-work queue's tabs, as the console's queue page shows them and the alerts' links open
# them: key -> (label, the job statuses the tab lists). Blocked jobs never sent anything (their
# identity check failed first): apart from the work that may have reached the provider. Failed jobs
# did nothing (the provider refused, or every attempt was used): they wait for a retry or to be
# closed, apart from the unknown work.
QUEUE_TABS = {
    "human": ("Needs a human", (JobStatus.NEEDS_OPERATOR, JobStatus.ESCALATED, JobStatus.AWAITING_APPROVAL)),
    "blocked": ("Blocked, nothing sent", (JobStatus.BLOCKED,)),
    "reconciling": ("Reconciling", (JobStatus.NEEDS_RECONCILIATION,)),
    "failed": ("Failed", (JobStatus.FAILED,)),
}

# The part of the unknown-work queue that waits for a person (not for the reconciler).
NEEDS_HUMAN = (
    JobStatus.NEEDS_OPERATOR,
    JobStatus.ESCALATED,
    JobStatus.BLOCKED,
    JobStatus.AWAITING_APPROVAL,
)

FINISHED_JOB = (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)

# execution state -> (allowed delivery states or None for any, allowed side-effect states)
CONSISTENCY = {
    Execution.NOT_STARTED: ((Delivery.QUEUED,), (SideEffect.NOT_ATTEMPTED,)),
    Execution.RUNNING: ((Delivery.LEASED,), (SideEffect.NOT_ATTEMPTED, SideEffect.SUBMITTED)),
    Execution.SUCCEEDED: (None, (SideEffect.CONFIRMED,)),
    Execution.FAILED: (None, (SideEffect.NOT_ATTEMPTED, SideEffect.NOT_FOUND)),
    Execution.UNKNOWN: (None, (SideEffect.AMBIGUOUS,)),
    Execution.BLOCKED: (None, (SideEffect.NOT_ATTEMPTED,)),
}

# The job statuses that can summarise a job whose latest attempt is in this execution state.
JOB_STATUS_FOR_LATEST = {
    Execution.NOT_STARTED: (JobStatus.PENDING,),
    Execution.RUNNING: (JobStatus.RUNNING,),
    Execution.SUCCEEDED: (JobStatus.SUCCEEDED,),
    Execution.FAILED: (
        JobStatus.FAILED,
        JobStatus.CANCELLED,
        JobStatus.AWAITING_APPROVAL,
        JobStatus.NEEDS_OPERATOR,
        JobStatus.ESCALATED,
    ),
    Execution.UNKNOWN: (
        JobStatus.NEEDS_RECONCILIATION,
        JobStatus.NEEDS_OPERATOR,
        JobStatus.ESCALATED,
        JobStatus.AWAITING_APPROVAL,
        JobStatus.CANCELLED,
    ),
    Execution.BLOCKED: (JobStatus.BLOCKED, JobStatus.ESCALATED, JobStatus.CANCELLED),
}
