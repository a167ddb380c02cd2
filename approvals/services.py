"""Approvals: request, approve, reject, withdraw, expire — the transitions of ApprovalRequest.

Each takes the job's row lock first (as every transition does) and writes its LedgerEvent in
the same transaction. Four eyes is checked here with a clear message, against the job's whole
history (approvals.foureyes), and enforced again by the database (its CHECK constraints and the
`approval_four_eyes_history` trigger).
"""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta

from django.conf import settings
from django.db import transaction

from approvals.foureyes import excluded_identities, why_excluded
from approvals.identities import identities_of, provider_identity
from approvals.models import ApprovalRequest, ApprovalStatus
from ledger.models import Attempt, Job
from ledger.moments import kept_time
from ledger.services.errors import LedgerError
from ledger.services.transitions import Batch, ClockTimestamp, latest_attempt, lock_job
from ledger.states import FINISHED_JOB, ActorType, EventKind, Execution, JobStatus


class ApprovalRefused(LedgerError):
    """The approval decision is not allowed; nothing was changed."""


def payload_digest(payload: dict) -> str:
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def open_approval_request(
    batch: Batch,
    job: Job,
    attempt: Attempt,
    *,
    requested_by,
    actor: str,
    actor_type: str,
    reason: str,
    evidence: dict | None = None,
) -> ApprovalRequest:
    """Within the caller's transaction, job locked, latest attempt closed: ask for approval.

    `requested_by` is the person whose action led to the request (the operator who marked the
    effect not found, or who sent the job back to the reconciler, or who issued the worker token
    whose agent answered not found), or None when nobody did. Nobody the job's whole history
    excludes may decide it either (approvals.foureyes): the request records who, for the database.
    """
    request = ApprovalRequest.objects.create(
        job=job,
        attempt=attempt,
        requested_by=requested_by,
        requested_by_actor=actor[:200],
        requested_by_identities=identities_of(requested_by),
        excluded_identities=excluded_identities(job, acting=actor, also=requested_by),
        reason=reason,
        expires_at=job.db_now + timedelta(hours=settings.RECKON_APPROVAL_TTL_HOURS),
        payload_digest=payload_digest(job.payload),
        evidence=evidence or {},
    )
    batch.transition(
        job,
        attempt,
        actor_type=actor_type,
        actor=actor,
        kind=EventKind.APPROVAL_REQUESTED,
        job_status=JobStatus.AWAITING_APPROVAL,
        note=reason,
        evidence={"approval_request": request.pk, "payload_digest": request.payload_digest,
                  "requested_by": requested_by.get_username() if requested_by else None},
    )
    return request


def request_approval(*, job_id: str, user, reason: str, evidence: dict | None = None) -> ApprovalRequest:
    """Ask a second person to approve replaying a job whose latest attempt did nothing."""
    reason = _required_note(reason, "a reason")
    with transaction.atomic():
        job = lock_job(job_id=job_id)
        attempt = latest_attempt(job)
        if job.status in FINISHED_JOB or job.status == JobStatus.AWAITING_APPROVAL:
            raise ApprovalRefused(f"job {job_id} is {job.status}: no approval can be requested")
        if attempt.execution_state != Execution.FAILED:
            raise ApprovalRefused(
                f"attempt {attempt.number} is {attempt.execution_state}: a replay can be approved "
                "only once the latest attempt is known to have done nothing"
            )
        with Batch() as batch:
            return open_approval_request(
                batch,
                job,
                attempt,
                requested_by=user,
                actor=user.get_username(),
                actor_type=ActorType.OPERATOR,
                reason=reason,
                evidence=evidence,
            )


def approve(*, request_id: int, user, note: str) -> ApprovalRequest:
    """Four eyes, same payload: then open the next attempt with the same key and dispatch it."""
    note = _required_note(note, "a note")
    with transaction.atomic():
        job, request, attempt = _pending(request_id)
        _four_eyes(job, request, user, "approve it")
        digest = payload_digest(job.payload)
        if digest != request.payload_digest:
            raise ApprovalRefused(
                f"the job's payload changed since approval was requested (digest {digest[:12]}… "
                f"is not {request.payload_digest[:12]}…); request approval again"
            )
        _set_decision(request, ApprovalStatus.APPROVED, user=user, note=note, at=job.db_now)
        with Batch() as batch:
            batch.record_unchanged(
                job,
                attempt,
                actor_type=ActorType.APPROVER,
                actor=user.get_username(),
                kind=EventKind.APPROVAL_GRANTED,
                note=note,
                evidence={"approval_request": request.pk, "payload_digest": digest,
                          "approver": {"username": user.get_username(), **provider_identity(user)}},
            )
            batch.open_next_attempt(
                job,
                attempt,
                actor=user.get_username(),
                actor_type=ActorType.APPROVER,
                note=f"replay approved by {user.get_username()}: {note}",
                # An operator's retry of a failed job asks for one attempt beyond the policy's number.
                one_more="retry_of_failed_job" in request.evidence,
            )
    return request


def reject(*, request_id: int, user, note: str) -> ApprovalRequest:
    """No replay: the job is cancelled and its latest attempt stays as it is."""
    note = _required_note(note, "a note")
    with transaction.atomic():
        job, request, attempt = _pending(request_id)
        _four_eyes(job, request, user, "decide it; withdraw it instead")
        _set_decision(request, ApprovalStatus.REJECTED, user=user, note=note, at=job.db_now)
        _close(job, attempt, request, kind=EventKind.APPROVAL_REJECTED, job_status=JobStatus.CANCELLED,
               actor_type=ActorType.APPROVER, actor=user.get_username(), note=note)
    return request


def withdraw(*, request_id: int, user, note: str) -> ApprovalRequest:
    """The request is taken back; the job goes in front of an operator again."""
    note = _required_note(note, "a note")
    with transaction.atomic():
        job, request, attempt = _pending(request_id)
        _set_decision(request, ApprovalStatus.WITHDRAWN, user=None, note=note, at=job.db_now)
        _close(job, attempt, request, kind=EventKind.APPROVAL_WITHDRAWN, job_status=JobStatus.NEEDS_OPERATOR,
               actor_type=ActorType.OPERATOR, actor=user.get_username(), note=note)
    return request


def expire_due_approvals(*, actor: str = "approval-expiry") -> int:
    """Pending requests past their expiry become expired; their jobs need an operator."""
    due = list(
        ApprovalRequest.objects.filter(status=ApprovalStatus.PENDING, expires_at__lte=ClockTimestamp())
        .order_by("expires_at")
        .values_list("pk", flat=True)
    )
    expired = 0
    for request_id in due:
        with transaction.atomic():
            try:
                job, request, attempt = _pending(request_id, allow_expired=True)
            except ApprovalRefused:
                continue  # decided since we looked
            if request.expires_at > job.db_now:
                continue
            note = f"approval request expired at {kept_time(request.expires_at)} without a decision"
            _set_decision(request, ApprovalStatus.EXPIRED, user=None, note=note, at=job.db_now)
            _close(job, attempt, request, kind=EventKind.APPROVAL_EXPIRED, job_status=JobStatus.NEEDS_OPERATOR,
                   actor_type=ActorType.SYSTEM, actor=actor, note=note)
            expired += 1
    return expired


def withdraw_pending_for(job: Job, *, actor: str, actor_type: str, note: str) -> ApprovalRequest | None:
    """Within a transition that closes the job: its pending request, if any, is withdrawn."""
    request = (
        ApprovalRequest.objects.select_for_update().filter(job=job, status=ApprovalStatus.PENDING).first()
    )
    if request is not None:
        _set_decision(request, ApprovalStatus.WITHDRAWN, user=None, note=note, at=job.db_now)
    return request


def _pending(request_id: int, *, allow_expired: bool = False) -> tuple[Job, ApprovalRequest, Attempt]:
    try:
        job_id = ApprovalRequest.objects.values_list("job__job_id", flat=True).get(pk=request_id)
    except ApprovalRequest.DoesNotExist:
        raise ApprovalRefused(f"no approval request {request_id}") from None
    job = lock_job(job_id=job_id)
    request = ApprovalRequest.objects.select_for_update().get(pk=request_id)
    if request.status != ApprovalStatus.PENDING:
        who = f" by {request.decided_by.get_username()}" if request.decided_by_id else ""
        when = f" at {kept_time(request.decided_at)}" if request.decided_at else ""
        raise ApprovalRefused(f"approval request {request_id} is already {request.status}{who}{when}")
    if not allow_expired and request.expires_at <= job.db_now:
        raise ApprovalRefused(f"approval request {request_id} expired at {kept_time(request.expires_at)}")
    attempt = latest_attempt(job)
    if attempt.pk != request.attempt_id or job.status != JobStatus.AWAITING_APPROVAL:
        raise ApprovalRefused(
            f"job {job_id} moved on since approval was requested (it is {job.status}, "
            f"latest attempt {attempt.number})"
        )
    return job, request, attempt


def _four_eyes(job: Job, request: ApprovalRequest, user, what: str) -> None:
    """The approver is not the person whose action led to the request (who asked, or who issued the
    worker token whose agent asked, answered or began the attempt), nor anyone the job's whole
    history excludes (approvals.foureyes): who asked for any of its replays, decided on it, wrote
    the payload being replayed, or issued a token whose answers or attempts are in it."""
    name = user.get_username()
    same = sorted(set(identities_of(user)) & set(request.requested_by_identities))
    if same and request.requested_by_id != user.pk:
        raise ApprovalRefused(
            f"four eyes: {name} is the same person as {request.requested_by_actor}, who requested this approval "
            f"(both accounts are {', '.join(same)}), and cannot {what}; another approver must decide"
        )
    if request.requested_by_id is not None and request.requested_by_id == user.pk:
        through = request.requested_by_actor
        if through == "reconciler":
            behind = (" (the reconciler asked, after a step of theirs: sending the attempt back to it, or "
                      f"beginning it with a worker token {name} issued)")
        else:
            # The MCP gateway's agents are named mcp:<token>:<client>; a pull reconciler's answers otherwise.
            given = "a tool call made" if through.startswith("mcp:") else "an answer given"
            behind = "" if through == name else f" (through {through}: {given} with a worker token {name} issued)"
        raise ApprovalRefused(
            f"four eyes: {name} requested this approval{behind} and cannot {what}; another approver must decide"
        )
    why = why_excluded(job, user)
    if why is not None:
        raise ApprovalRefused(f"four eyes: {why} and cannot {what}; another approver must decide")


def _set_decision(request: ApprovalRequest, status: str, *, user, note: str, at) -> None:
    request.status, request.decided_by, request.decided_at, request.decision_note = status, user, at, note
    request.decided_by_identities = identities_of(user)
    if user is not None:  # the history as it stands now, for the database's check of this decision
        request.excluded_identities = sorted(set(request.excluded_identities) | set(excluded_identities(request.job)))
    request.save(update_fields=["status", "decided_by", "decided_at", "decision_note", "decided_by_identities",
                                "excluded_identities"])


def _close(job, attempt, request: ApprovalRequest, *, kind: str, job_status: str, actor_type: str, actor: str,
           note: str) -> None:
    """The job leaves awaiting_approval with the request's decision (its event names the request)."""
    with Batch() as batch:
        batch.transition(job, attempt, kind=kind, job_status=job_status, actor_type=actor_type, actor=actor,
                         note=note, evidence={"approval_request": request.pk})


def _required_note(note, what: str) -> str:
    if not isinstance(note, str) or not note.strip():
        raise ApprovalRefused(f"{what} is required: say why, for the audit trail")
    return note.strip()
