"""Operators' decisions on a job: confirm, mark not found, escalate, retry reconciliation, cancel.

Each takes the latest attempt's `version` the operator saw: if the job moved on since, the
decision is refused with who changed it and when, and nothing changes. A decision the state
does not allow is refused with the reason. Every accepted decision writes its event (actor type
operator, the note) in the same transaction as the change.
"""

from __future__ import annotations

from django.db import transaction

from ledger.actions import get_action
from ledger.models import Attempt, Job, LedgerEvent
from ledger.services.core import (
    LedgerError,
    latest_attempt,
    lock_job,
    open_next_attempt,
    transition,
    trigger_reconciliation,
)
from ledger.states import FINISHED_JOB, ActorType, Execution, JobStatus, SideEffect

DECISIONS = ("confirm_effect", "mark_not_found", "escalate", "retry_reconciliation", "cancel_job")
ESCALATABLE = (JobStatus.NEEDS_RECONCILIATION, JobStatus.NEEDS_OPERATOR, JobStatus.BLOCKED)
RECONCILABLE = (JobStatus.NEEDS_RECONCILIATION, JobStatus.NEEDS_OPERATOR, JobStatus.ESCALATED)


class DecisionRefused(LedgerError):
    """The decision is not allowed in the job's state (or lacks a note); nothing changed."""


class StaleDecision(DecisionRefused):
    """The operator decided on a version of the job that is no longer current."""


def allowed_decisions(job: Job) -> list[str]:
    """The decisions the job's current state allows, in the order the console shows them."""
    return [name for name in DECISIONS if _why_not(name, job, latest_attempt(job)) is None]


def _why_not(decision: str, job: Job, attempt: Attempt) -> str | None:
    """None when `decision` is allowed; otherwise the reason it is not."""
    state = attempt.execution_state
    if job.status in FINISHED_JOB:
        return f"job {job.job_id} is already {job.status}"
    if decision == "confirm_effect" and state != Execution.UNKNOWN:
        return f"only an unknown attempt can be confirmed; attempt {attempt.number} is {state}"
    if decision == "mark_not_found" and state not in (Execution.UNKNOWN, Execution.BLOCKED):
        return (
            f"only an unknown or blocked attempt can be marked not found; attempt {attempt.number} is {state}"
        )
    if decision == "escalate" and job.status not in ESCALATABLE:
        return f"a job that is {job.status} cannot be escalated"
    if decision == "retry_reconciliation":
        if state != Execution.UNKNOWN or job.status not in RECONCILABLE:
            return f"reconciliation is for an unknown attempt; job is {job.status}, attempt {attempt.number} is {state}"
        if not get_action(job.action).queryable:
            return f"action {job.action} cannot be queried at its provider; confirm or mark not found instead"
    if decision == "cancel_job" and (job.status == JobStatus.RUNNING or state == Execution.RUNNING):
        return "a running job cannot be cancelled; wait for its attempt to finish or its lease to expire"
    return None


def confirm_effect(*, job_id: str, version: int, user, note: str) -> Attempt:
    """The operator has evidence the effect happened: the attempt succeeded, never replayed."""
    with _deciding("confirm_effect", job_id, version, user, note) as (job, attempt, note):
        _resolved(job)
        transition(
            job,
            attempt,
            **_by(user),
            kind="operator_confirmed_effect",
            job_status=JobStatus.SUCCEEDED,
            execution_state=Execution.SUCCEEDED,
            side_effect_state=SideEffect.CONFIRMED,
            note=note,
        )
    return attempt


def mark_not_found(*, job_id: str, version: int, user, note: str) -> Attempt:
    """Nothing happened: replay with the same key, or for an irreversible action ask for approval."""
    with _deciding("mark_not_found", job_id, version, user, note) as (job, attempt, note):
        _resolved(job)
        transition(
            job,
            attempt,
            **_by(user),
            kind="operator_marked_not_found",
            execution_state=Execution.FAILED,
            side_effect_state=(
                SideEffect.NOT_FOUND
                if attempt.side_effect_state == SideEffect.AMBIGUOUS
                else SideEffect.NOT_ATTEMPTED
            ),
            note=note,
        )
        if get_action(job.action).reversible:
            open_next_attempt(job, attempt, **_by(user), note=f"replay with the same key: {note}")
        else:
            from approvals.services import open_approval_request

            open_approval_request(
                job,
                attempt,
                requested_by=user,
                **_by(user),
                reason=f"{user.get_username()} marked the effect not found: {note}",
                evidence=_operator_evidence(job, attempt, user, note),
            )
    return attempt


def _operator_evidence(job, attempt, user, note: str) -> dict:
    """What the approver should see: who said "not found", on what, and what the lookups said."""
    from reconciliation.models import ReconciliationCheck

    checks = ReconciliationCheck.objects.filter(job=job).order_by("-id")[:5]
    return {
        "marked_not_found_by": user.get_username(),
        "operator_note": note,
        "attempt": attempt.number,
        "attempt_error": attempt.error,
        "reconciliation_checks": [
            {"outcome": c.outcome, "reason": c.evidence.get("reason", ""), "checked_at": c.checked_at.isoformat()}
            for c in checks
        ],
    }


def escalate(*, job_id: str, version: int, user, note: str) -> Attempt:
    with _deciding("escalate", job_id, version, user, note) as (job, attempt, note):
        transition(
            job, attempt, **_by(user), kind="operator_escalated", job_status=JobStatus.ESCALATED, note=note
        )
    return attempt


def retry_reconciliation(*, job_id: str, version: int, user, note: str) -> Attempt:
    """Back to the reconciler now, with a fresh bound of checks."""
    with _deciding("retry_reconciliation", job_id, version, user, note) as (job, attempt, note):
        Job.objects.filter(pk=job.pk).update(next_check_at=None, check_count=0)
        transition(
            job,
            attempt,
            **_by(user),
            kind="operator_retried_reconciliation",
            job_status=JobStatus.NEEDS_RECONCILIATION,
            note=note,
        )
        trigger_reconciliation()  # also when the job was already waiting for it
    return attempt


def cancel_job(*, job_id: str, version: int, user, note: str) -> Attempt:
    """No more attempts. A queued attempt is closed as not attempted; an unknown one stays unknown."""
    with _deciding("cancel_job", job_id, version, user, note) as (job, attempt, note):
        from approvals.services import withdraw_pending_for

        _resolved(job)
        withdraw_pending_for(job, **_by(user), note=f"job cancelled: {note}")
        closing = (
            {"execution_state": Execution.FAILED} if attempt.execution_state == Execution.NOT_STARTED else {}
        )
        transition(
            job,
            attempt,
            **_by(user),
            kind="operator_cancelled",
            job_status=JobStatus.CANCELLED,
            note=note,
            **closing,
        )
    return attempt


class _deciding:
    """Lock the job, refuse stale or disallowed decisions, and hold one transaction open."""

    def __init__(self, decision: str, job_id: str, version: int, user, note: str):
        if not isinstance(note, str) or not note.strip():
            raise DecisionRefused("a note is required: say why, for the audit trail")
        self.decision, self.job_id, self.version, self.note = decision, job_id, version, note.strip()
        self.user = user
        self.atomic = transaction.atomic()

    def __enter__(self):
        self.atomic.__enter__()
        try:
            job = lock_job(job_id=self.job_id)
            attempt = latest_attempt(job)
            if attempt.version != self.version:
                last = LedgerEvent.objects.filter(job=job).order_by("-id").first()
                raise StaleDecision(
                    f"job {self.job_id} changed since you looked (version {self.version}, now "
                    f"{attempt.version}): already resolved by {last.actor} ({last.actor_type}) at "
                    f"{last.at.isoformat(timespec='seconds')}: {last.kind}"
                    + (f" — {last.note}" if last.note else "")
                )
            why = _why_not(self.decision, job, attempt)
            if why:
                raise DecisionRefused(f"{self.decision.replace('_', ' ')} refused: {why}")
        except BaseException as exc:
            self.atomic.__exit__(type(exc), exc, exc.__traceback__)
            raise
        return job, attempt, self.note

    def __exit__(self, *exc):
        return self.atomic.__exit__(*exc)


def _by(user) -> dict:
    return {"actor": user.get_username(), "actor_type": ActorType.OPERATOR}


def _resolved(job: Job) -> None:
    """A person has decided: reconciliation and any recovery hold are over for this job."""
    Job.objects.filter(pk=job.pk).update(next_check_at=None, check_count=0, recovery_pending=False)
    job.recovery_pending = False
