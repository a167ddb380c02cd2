"""What the transition layer refuses. A refusal leaves the ledger unchanged, except for the
event that records it (written and committed before the exception is raised)."""

from pathlib import PurePath


class LedgerError(Exception):
    """A refused operation. The ledger is unchanged except for the event recording the refusal."""


class InvalidJob(LedgerError):
    pass


class JobConflict(LedgerError):
    pass


class JobArchived(JobConflict):
    """The job id belongs to a job whose whole history was archived: it is never run again."""

    def __init__(self, tombstone):
        super().__init__(
            f"job {tombstone.job_id!r} {tombstone.status} on {tombstone.finished_at:%Y-%m-%d %H:%M} UTC and its "
            f"history was archived on {tombstone.checkpoint.archived_at:%Y-%m-%d} in "
            f"{PurePath(tombstone.checkpoint.archive_file).name}: a job id is never run again")
        self.tombstone = tombstone


class ClaimRefused(LedgerError):
    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


class StaleLease(LedgerError):
    """A write by a worker whose lease is no longer the current one: rejected and recorded."""


class IdentityMismatch(LedgerError):
    pass


class GateClosed(LedgerError):
    """The dead-man gate holds irreversible side effects; the attempt went back to the queue."""


class NotInScope(LedgerError):
    """The job is outside the caller's scope of tenants and actions (or does not exist): untouched."""
