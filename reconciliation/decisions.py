"""Operators' decisions on a job: confirm, mark not found, escalate, retry reconciliation, cancel;
for a blocked attempt (its identity did not match, nothing was sent): re-check identity, replay;
for a failed job (nothing was done): retry as is, retry with a corrected payload, close.
Each is declared once, with its label, help, key and role, in `reconciliation.registry`.

The rules they apply are the reconciler's (`reconciliation.resolution`); this module adds what a
person's decision needs around them.

Each takes the latest attempt's `version` the operator saw: if the job moved on since, the
decision is refused with who changed it and when, and nothing changes. A decision the state
does not allow is refused with the reason. Every accepted decision writes its event (actor type
operator, the note) in the same transaction as the change.
"""

from __future__ import annotations

from contextlib import contextmanager
from datetime import datetime

from django.db import transaction
from django.db.models import F

from approvals.models import ApprovalRequest
from approvals.services import open_approval_request
from ledger.actions import declared_action
from ledger.models import Attempt, Job, LedgerEvent
from ledger.moments import when
from ledger.services import (
    Batch,
    CommentRefused,
    InvalidJob,
    LedgerError,
    comment_on_job,
    identity_mismatch,
    latest_attempt,
    lock_job,
)
from ledger.services.jobs import json_object
from ledger.states import FINISHED_JOB, ActorType, EventKind, Execution, JobStatus
from reconciliation import registry, resolution
from reconciliation.models import ReconciliationCheck
from reconciliation.resolution import By

ESCALATABLE = (JobStatus.NEEDS_RECONCILIATION, JobStatus.NEEDS_OPERATOR, JobStatus.BLOCKED)
RECONCILABLE = (JobStatus.NEEDS_RECONCILIATION, JobStatus.NEEDS_OPERATOR, JobStatus.ESCALATED)
FOR_FAILED_JOBS = ("retry_failed", "retry_corrected", "close_failed")


class DecisionRefused(LedgerError):
    """The decision is not allowed in the job's state (or lacks a note); nothing changed."""


class StaleDecision(DecisionRefused):
    """The operator decided on a version of the job that is no longer current. The message says
    who changed it, how and when, as a colleague would ("otto escalated this job at 14:02 (2
    minutes ago) — your decision was not applied"); `event` is that change."""

    def __init__(self, message: str, *, event: LedgerEvent | None = None):
        super().__init__(message)
        self.event = event


class HeldDecision(DecisionRefused):
    """Another operator holds the job ("I'm on it"): deciding needs `despite_holder`, once the
    person deciding has been told whose job it is."""

    def __init__(self, message: str, *, holder: str, held_since: datetime):
        super().__init__(message)
        self.holder, self.held_since = holder, held_since


# What a change to a job reads like in a sentence that starts with who made it.
DID = {
    EventKind.OPERATOR_CONFIRMED_EFFECT: "confirmed the effect of this job",
    EventKind.OPERATOR_MARKED_NOT_FOUND: "marked this job's effect not found",
    EventKind.OPERATOR_ESCALATED: "escalated this job",
    EventKind.OPERATOR_RETRIED_RECONCILIATION: "sent this job back to reconciliation",
    EventKind.OPERATOR_CANCELLED: "cancelled this job",
    EventKind.OPERATOR_RETRIED_FAILED: "retried this failed job",
    EventKind.OPERATOR_CLOSED_FAILED: "closed this failed job",
    EventKind.RECONCILED_CONFIRMED: "found the effect at the provider",
    EventKind.RECONCILED_NOT_FOUND: "found no effect at the provider",
    EventKind.RECONCILED_CONFLICT: "found conflicting effects and escalated this job",
    EventKind.RECONCILIATION_GAVE_UP: "gave up looking and handed this job to an operator",
    EventKind.NOT_QUERYABLE: "handed this job to an operator (its provider cannot be asked)",
    EventKind.APPROVAL_GRANTED: "approved the replay of this job",
    EventKind.APPROVAL_REJECTED: "rejected the replay of this job",
    EventKind.APPROVAL_EXPIRED: "let the approval of this job expire",
    EventKind.ATTEMPT_OPENED: "opened a new attempt of this job",
    EventKind.OBSERVATION_LOST: "lost sight of this job's effect",
    EventKind.LEASE_EXPIRED_UNKNOWN: "found this job's lease expired with its effect unknown",
    EventKind.SUCCEEDED: "recorded this job's success",
    EventKind.FAILED: "recorded this job's failure",
}


def stale_message(event: LedgerEvent, now: datetime) -> str:
    did = DID.get(event.kind, f"changed this job ({event.kind.replace('_', ' ')})")
    who = event.actor if event.actor_type in ("operator", "approver") else f"the {event.actor_type} {event.actor}"
    return f"{who} {did} at {when(event.at, now)} — your decision was not applied" + (
        f". Their note: {event.note}" if event.note and event.actor_type in ("operator", "approver") else ""
    )


def allowed_decisions(job: Job, attempt: Attempt | None = None) -> list[str]:
    """The decisions the job's current state allows, in the order the console shows them
    (`attempt`: the job's latest, when the caller has it already)."""
    attempt = attempt or latest_attempt(job)
    return [name for name in DECISIONS if _why_not(name, job, attempt) is None]


def _why_not(decision: str, job: Job, attempt: Attempt) -> str | None:
    """None when `decision` is allowed; otherwise the reason it is not."""
    state = attempt.execution_state
    if decision in FOR_FAILED_JOBS:
        return _why_not_for_failed(decision, job, attempt)
    if job.status in FINISHED_JOB:
        return f"job {job.job_id} is already {job.status}"
    if decision == "mark_not_found" and not job.policy and declared_action(job.action) is None:
        return (f"action {job.action} is not declared in this deployment and the job predates policy "
                "snapshots: whether a replay needs approval is unknown here")
    if decision in ("recheck_identity", "replay_blocked") and state != Execution.BLOCKED:
        return f"only a blocked attempt has an identity to re-check; attempt {attempt.number} is {state}"
    if decision == "recheck_identity":
        action = declared_action(job.action)
        if action is None or action.observe_identity is None:
            return (f"action {job.action} has no identity check in this deployment (its own workers observe "
                    "the identity): fix the binding where the worker runs, then cancel and enqueue again")
    if decision == "replay_blocked":
        mismatch = identity_mismatch(job.identity, attempt.observed_identity)
        if mismatch:
            return f"the binding still does not match ({mismatch.removeprefix('identity mismatch: ')}); re-check identity first"
    if decision == "mark_not_found" and state == Execution.BLOCKED:
        return ("a blocked attempt sent nothing, so there is nothing to find: re-check identity, and replay "
                "once the binding matches")
    if decision == "request_approval":
        if state != Execution.FAILED or job.status not in (JobStatus.NEEDS_OPERATOR, JobStatus.ESCALATED):
            return (f"approval is asked again only for a job back with the operators after its attempt did "
                    f"nothing; job is {job.status}, attempt {attempt.number} is {state}")
    if decision == "confirm_effect" and state != Execution.UNKNOWN:
        return f"only an unknown attempt can be confirmed; attempt {attempt.number} is {state}"
    if decision == "mark_not_found" and state != Execution.UNKNOWN:
        return f"only an unknown attempt can be marked not found; attempt {attempt.number} is {state}"
    if decision == "escalate" and job.status not in ESCALATABLE:
        return f"a job that is {job.status} cannot be escalated"
    if decision == "retry_reconciliation":
        if state != Execution.UNKNOWN or job.status not in RECONCILABLE:
            return f"reconciliation is for an unknown attempt; job is {job.status}, attempt {attempt.number} is {state}"
        action = declared_action(job.action)
        if action is None:
            return f"action {job.action} is not declared in this deployment: nothing here can look it up"
        if not action.queryable or not action.reconciler:
            return f"action {job.action} cannot be queried at its provider; confirm or mark not found instead"
    if decision == "cancel_job" and (job.status == JobStatus.RUNNING or state == Execution.RUNNING):
        return "a running job cannot be cancelled; wait for its attempt to finish or its lease to expire"
    return None


def _why_not_for_failed(decision: str, job: Job, attempt: Attempt) -> str | None:
    if job.status != JobStatus.FAILED or attempt.execution_state != Execution.FAILED:
        return (f"only a failed job can be retried or closed; job is {job.status}, "
                f"attempt {attempt.number} is {attempt.execution_state}")
    if decision == "close_failed":
        return None
    # The invariant: no retry may create a new side effect while a previous attempt is unknown.
    unknown = job.attempts.filter(execution_state=Execution.UNKNOWN).values_list("number", flat=True).first()
    if unknown is not None:
        return f"attempt {unknown} is unknown: no retry may run until it is reconciled"
    if not job.policy and declared_action(job.action) is None:
        return (f"action {job.action} is not declared in this deployment and the job predates policy "
                "snapshots: whether a retry needs approval is unknown here")
    if decision == "retry_corrected" and job.action.startswith("mcp:"):  # the gateway's tool calls
        return "an agent's tool call runs with the arguments the agent sends: correct them in the agent's next call"
    return None


def confirm_effect(*, job_id: str, version: int, user, note: str, evidence: str = "") -> Attempt:
    """The operator has evidence the effect happened: the attempt succeeded, never replayed.
    `evidence` (what they saw, e.g. the provider's effect log) goes into the event."""
    with _deciding("confirm_effect", job_id, version, user, note) as (batch, job, attempt, note):
        resolution.confirm(batch, job, attempt, by=By.person(user), kind=EventKind.OPERATOR_CONFIRMED_EFFECT,
                           note=note, evidence=_seen(evidence))
    return attempt


def mark_not_found(*, job_id: str, version: int, user, note: str, evidence: str = "") -> Attempt:
    """Nothing happened: replay with the same key, or for an irreversible action ask for approval."""
    with _deciding("mark_not_found", job_id, version, user, note) as (batch, job, attempt, note):
        resolution.not_found(
            batch, job, attempt, by=By.person(user), kind=EventKind.OPERATOR_MARKED_NOT_FOUND, note=note,
            evidence=_seen(evidence),
            approval_reason=f"{user.get_username()} marked the effect not found: {note}",
            approval_evidence=_operator_evidence(job, attempt, user, note, evidence),
        )
    return attempt


def _seen(evidence: str) -> dict | None:
    """A person's evidence as the event keeps it (None: they gave none)."""
    evidence = evidence.strip() if isinstance(evidence, str) else ""
    return {"operator_evidence": evidence} if evidence else None


def _operator_evidence(job, attempt, user, note: str, evidence: str = "") -> dict:
    """What the approver should see: who said "not found", on what, and what the lookups said."""
    checks = ReconciliationCheck.objects.filter(job=job).order_by("-id")[:5]
    return {
        "marked_not_found_by": user.get_username(),
        "operator_note": note,
        **(_seen(evidence) or {}),
        "attempt": attempt.number,
        "attempt_error": attempt.error,
        "reconciliation_checks": [
            {"outcome": c.outcome, "reason": c.evidence.get("reason", ""), "checked_at": c.checked_at.isoformat()}
            for c in checks
        ],
    }


def escalate(*, job_id: str, version: int, user, note: str) -> Attempt:
    with _deciding("escalate", job_id, version, user, note) as (batch, job, attempt, note):
        resolution.escalate(batch, job, attempt, by=By.person(user), kind=EventKind.OPERATOR_ESCALATED, note=note)
    return attempt


def retry_reconciliation(*, job_id: str, version: int, user, note: str) -> Attempt:
    """Back to the reconciler now, with a fresh bound of checks."""
    with _deciding("retry_reconciliation", job_id, version, user, note) as (batch, job, attempt, note):
        resolution.retry_reconciliation(batch, job, attempt, by=By.person(user), note=note)
    return attempt


def cancel_job(*, job_id: str, version: int, user, note: str) -> Attempt:
    """No more attempts. A queued attempt is closed as not attempted; an unknown one stays unknown."""
    with _deciding("cancel_job", job_id, version, user, note) as (batch, job, attempt, note):
        resolution.cancel(batch, job, attempt, by=By.person(user), note=note)
    return attempt


def recheck_identity(*, job_id: str, version: int, user, note: str) -> Attempt:
    """Run the action's identity check again now; the attempt stays blocked and records what it saw.

    The check calls the provider, so it runs before the job is locked; the decision then applies
    only if the attempt is still the version the operator saw (a compare-and-set, as for any decision)."""
    _require_note(note)
    job = Job.objects.filter(job_id=job_id).first()
    if job is None:
        raise DecisionRefused(f"no job with id {job_id!r}")
    why = _why_not("recheck_identity", job, latest_attempt(job))
    if why:
        raise DecisionRefused(f"re-check identity refused: {why}")
    try:
        observed = declared_action(job.action).observe_identity(job)
    except Exception as exc:  # the identity could not even be read: nothing changes
        raise DecisionRefused(f"re-check identity: could not observe the identity: {exc}") from exc
    if not isinstance(observed, dict):
        raise DecisionRefused(f"re-check identity: the check returned {type(observed).__name__}, not an object")
    with _deciding("recheck_identity", job_id, version, user, note) as (batch, job, attempt, note):
        resolution.recheck_identity(batch, job, attempt, by=By.person(user), observed=observed,
                                    mismatch=identity_mismatch(job.identity, observed), note=note)
    return attempt


def replay_blocked(*, job_id: str, version: int, user, note: str) -> Attempt:
    """The binding matches now and the blocked attempt sent nothing: replay with the same key (an
    irreversible action asks a second person first, as for any replay)."""
    with _deciding("replay_blocked", job_id, version, user, note) as (batch, job, attempt, note):
        resolution.not_found(
            batch, job, attempt, by=By.person(user), kind=EventKind.OPERATOR_REPLAYED_BLOCKED, note=note,
            approval_reason=f"{user.get_username()} replays a blocked attempt whose identity now matches: {note}",
            approval_evidence={"replayed_by": user.get_username(), "operator_note": note, "attempt": attempt.number,
                               "binding": job.identity, "observed": attempt.observed_identity},
        )
    return attempt


def request_approval(*, job_id: str, version: int, user, note: str) -> Attempt:
    """The replay's approval request expired, was rejected or withdrawn: ask a second person again."""
    with _deciding("request_approval", job_id, version, user, note) as (batch, job, attempt, note):
        previous = ApprovalRequest.objects.filter(job=job).order_by("-id").values("pk", "status").first()
        open_approval_request(
            batch, job, attempt, requested_by=user, actor=user.get_username(), actor_type=ActorType.OPERATOR,
            reason=f"{user.get_username()} asks again: {note}",
            evidence={"asked_again_by": user.get_username(), "operator_note": note, "previous_request": previous},
        )
    return attempt


def retry_failed(*, job_id: str, version: int, user, note: str) -> Attempt:
    """One more attempt for a failed job, as it is, with the same key (an irreversible action asks
    a second person first)."""
    with _deciding("retry_failed", job_id, version, user, note) as (batch, job, attempt, note):
        resolution.retry_failed(batch, job, attempt, by=By.person(user), note=note,
                                approval_reason=f"{user.get_username()} retries a failed job: {note}")
    return attempt


def retry_corrected(*, job_id: str, version: int, user, note: str, payload=None) -> Attempt:
    """One more attempt for a failed job with a corrected payload (a JSON object, or its text), same
    key. A payload that is not a JSON object, or that changes nothing, is refused; nothing changes."""
    try:
        payload = json_object("the corrected payload", payload)
    except InvalidJob as invalid:
        raise DecisionRefused(f"retry with this payload refused: {invalid}") from None
    with _deciding("retry_corrected", job_id, version, user, note) as (batch, job, attempt, note):
        if payload == job.payload:
            raise DecisionRefused("retry with this payload refused: the payload is unchanged; retry as is instead")
        resolution.retry_failed(
            batch, job, attempt, by=By.person(user), note=note, payload=payload,
            approval_reason=f"{user.get_username()} retries a failed job with a corrected payload: {note}",
        )
    return attempt


def close_failed(*, job_id: str, version: int, user, note: str) -> Attempt:
    """The failure stands: no more attempts, the job leaves the failed work."""
    with _deciding("close_failed", job_id, version, user, note) as (batch, job, attempt, note):
        resolution.close_failed(batch, job, attempt, by=By.person(user), note=note)
    return attempt


_SERVICES = {
    "recheck_identity": recheck_identity,
    "replay_blocked": replay_blocked,
    "confirm_effect": confirm_effect,
    "mark_not_found": mark_not_found,
    "escalate": escalate,
    "retry_reconciliation": retry_reconciliation,
    "request_approval": request_approval,
    "retry_failed": retry_failed,
    "retry_corrected": retry_corrected,
    "close_failed": close_failed,
    "cancel_job": cancel_job,
}
# Every decision by name, in the registry's order (the order the console shows them).
DECISIONS = {decision.name: _SERVICES[decision.name] for decision in registry.JOB_DECISIONS}


def decide(decision: str, *, job_id: str, version: int, user, note: str, despite_holder: bool = False,
           payload=None, evidence: str = "") -> Attempt:
    """The decision called `decision` (one of DECISIONS), as a form names it; `payload` is for a
    decision that takes one (the registry's `takes_payload`), `evidence` for one that takes
    evidence (`takes_evidence`; ignored by the others). On a job another operator holds, it is
    refused (HeldDecision) unless `despite_holder`."""
    if decision not in DECISIONS:
        raise DecisionRefused(f"unknown decision {decision!r}; one of {', '.join(DECISIONS)}")
    declared = registry.REGISTRY[decision]
    extra = {"payload": payload} if declared.takes_payload else {}
    if declared.takes_evidence and evidence:
        extra["evidence"] = evidence
    try:
        with transaction.atomic():
            if not despite_holder:
                _refuse_if_held(job_id, version, user)
            return DECISIONS[decision](job_id=job_id, version=version, user=user, note=note, **extra)
    except StaleDecision as stale:
        # The race loser saw something too: their note stays in the job's history as a comment.
        try:
            comment_on_job(job_id=job_id, author=user.get_username(), actor_type=ActorType.OPERATOR, text=note,
                           evidence={"refused_decision": decision, "refused_because": str(stale)})
        except CommentRefused as refused:
            raise StaleDecision(f"{stale}. Your note was not kept: {refused}", event=stale.event) from stale
        raise StaleDecision(f"{stale}. Your note is kept in the job's history as a comment.",
                            event=stale.event) from stale


def _refuse_if_held(job_id: str, version: int, user) -> None:
    """Under the job lock (held until the decision's transaction ends): another person's hold
    stops the decision until the person deciding says they go ahead. A decision on a job that
    has changed since is not asked about the hold: it is refused as stale, which says more."""
    job = lock_job(job_id=job_id)
    if job.holder and job.holder != user.get_username() and latest_attempt(job).version == version:
        raise HeldDecision(
            f"{job.holder} has been on this job since {when(job.held_since, job.db_now)}: "
            "decide anyway, or leave it to them",
            holder=job.holder, held_since=job.held_since,
        )


def _require_note(note) -> None:
    if not isinstance(note, str) or not note.strip():
        raise DecisionRefused("a note is required: say why, for the audit trail")


@contextmanager
def _deciding(decision: str, job_id: str, version: int, user, note: str):
    """Lock the job, refuse stale or disallowed decisions, hold one transaction open, and write
    the decision's batch when the block ends (nothing, if it raises)."""
    _require_note(note)
    with transaction.atomic():
        job = lock_job(job_id=job_id)
        attempt = latest_attempt(job)
        if attempt.version != version:
            # The latest change of state (a hold or a signal changes none, so it is skipped).
            last = LedgerEvent.objects.filter(job=job).exclude(before=F("after")).order_by("-id").first()
            raise StaleDecision(stale_message(last, job.db_now), event=last)
        why = _why_not(decision, job, attempt)
        if why:
            raise DecisionRefused(f"{registry.REGISTRY[decision].label} refused: {why}")
        batch = Batch()
        yield batch, job, attempt, note.strip()
        batch.flush()
