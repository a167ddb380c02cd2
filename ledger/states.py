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
