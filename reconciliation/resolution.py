"""How unknown work is resolved: one set of rules for the reconciler and for operators.

Whoever establishes what happened to an attempt — the reconciler from the provider's answer
(`reconciliation.applying`), or a person in the console (`reconciliation.decisions`) — resolves
it here, through the transition layer's `Batch`, under the job lock:

- **confirmed**: the attempt succeeded; the job is done and never replayed.
- **not found**: the attempt failed and did nothing. A reversible action is replayed with the
  same idempotency key; an irreversible one waits for a second person's approval.
- **conflict** / **escalated**: a person must look; nothing is replayed.
- **to an operator**: the reconciler cannot tell (not queryable, or gave up after its bound).
- **cancelled**: no more attempts; a pending approval is withdrawn.
- **released**: after a restore, a queued attempt the provider never saw may run.

And the ways out of a failed job (the attempt was refused, nothing was done): **retried** once
more with the same key, its payload as is or corrected (an irreversible action asks a second
person first, as a replay does), or **closed**.

Each also ends reconciliation's schedule and any recovery hold (`_resolved`).
"""

from __future__ import annotations

from dataclasses import dataclass

from approvals.foureyes import token_issuer
from approvals.identities import account_named
from approvals.services import open_approval_request, withdraw_pending_for
from ledger.actions import policy_of
from ledger.models import Attempt, Job, LedgerEvent
from ledger.services import Batch, trigger_reconciliation
from ledger.states import ActorType, EventKind, Execution, JobStatus, SideEffect


@dataclass(frozen=True)
class By:
    """Who resolves: an actor name and type, and the person (a user) if it is one."""

    actor: str
    actor_type: str
    user: object = None

    @classmethod
    def person(cls, user) -> By:
        return cls(user.get_username(), ActorType.OPERATOR, user)

    @property
    def fields(self) -> dict:
        return {"actor": self.actor, "actor_type": self.actor_type}


def confirm(batch: Batch, job: Job, attempt: Attempt, *, by: By, kind: EventKind, note: str,
            evidence: dict | None = None, result_ref: str = "") -> None:
    """The effect happened: the attempt succeeded and the job is done, never replayed."""
    _resolved(batch, job)
    batch.transition(
        job, attempt, **by.fields, kind=kind, job_status=JobStatus.SUCCEEDED,
        execution_state=Execution.SUCCEEDED, side_effect_state=SideEffect.CONFIRMED,
        result_ref=result_ref[:500], note=note, evidence=evidence,
    )


def not_found(batch: Batch, job: Job, attempt: Attempt, *, by: By, kind: EventKind, note: str,
              evidence: dict | None = None, approval_reason: str, approval_evidence: dict | None = None) -> str:
    """Nothing happened: replay with the same key, or for an irreversible action ask a second
    person. Returns what followed: "replayed", "failed" (no attempt left) or "awaiting_approval"."""
    _resolved(batch, job)
    batch.transition(
        job, attempt, **by.fields, kind=kind, execution_state=Execution.FAILED,
        side_effect_state=(
            SideEffect.NOT_FOUND if attempt.side_effect_state == SideEffect.AMBIGUOUS else SideEffect.NOT_ATTEMPTED
        ),
        note=note, evidence=evidence,
    )
    if policy_of(job).reversible:  # as declared when the job was enqueued
        replay = batch.open_next_attempt(job, attempt, **by.fields, note=f"replay with the same key: {note}")
        return "replayed" if replay else "failed"
    open_approval_request(
        batch, job, attempt, requested_by=by.user or _person_behind(job, attempt), **by.fields,
        reason=approval_reason, evidence=approval_evidence if approval_evidence is not None else evidence,
    )
    return "awaiting_approval"


def escalate(batch: Batch, job: Job, attempt: Attempt, *, by: By, kind: EventKind, note: str,
             evidence: dict | None = None) -> None:
    """A person must look (an operator's call, or the provider's answer contradicts the job)."""
    _resolved(batch, job)
    batch.transition(job, attempt, **by.fields, kind=kind, job_status=JobStatus.ESCALATED, note=note,
                     evidence=evidence, **_closing_queued(attempt, note))


def to_operator(batch: Batch, job: Job, attempt: Attempt, *, by: By, kind: EventKind, note: str,
                evidence: dict | None = None) -> None:
    """The reconciler cannot tell: a person must establish what happened."""
    _resolved(batch, job)
    batch.transition(job, attempt, **by.fields, kind=kind, job_status=JobStatus.NEEDS_OPERATOR, note=note,
                     evidence=evidence, **_closing_queued(attempt, note))


def release_from_recovery(batch: Batch, job: Job, attempt: Attempt, *, by: By, note: str,
                          evidence: dict | None = None) -> None:
    """After a restore, the queued attempt was never sent (the provider has no trace of it): it may run."""
    _resolved(batch, job)
    batch.record_unchanged(job, attempt, **by.fields, kind=EventKind.RECOVERY_RELEASED,
                           note=f"released for work: {note}", evidence=evidence)
    batch.dispatch_run(job)


def cancel(batch: Batch, job: Job, attempt: Attempt, *, by: By, note: str) -> None:
    """No more attempts. A queued attempt is closed as not attempted; an unknown one stays unknown."""
    _resolved(batch, job)
    withdraw_pending_for(job, **by.fields, note=f"job cancelled: {note}")
    closing = {"execution_state": Execution.FAILED} if attempt.execution_state == Execution.NOT_STARTED else {}
    batch.transition(job, attempt, **by.fields, kind=EventKind.OPERATOR_CANCELLED,
                     job_status=JobStatus.CANCELLED, note=note, **closing)


def recheck_identity(batch: Batch, job: Job, attempt: Attempt, *, by: By, observed: dict, mismatch: str,
                     note: str) -> None:
    """A blocked attempt's binding looked at again: what the worker would run as now is recorded
    on the attempt (it stays blocked; nothing was sent). A match makes a replay possible."""
    batch.transition(
        job, attempt, **by.fields, kind=EventKind.OPERATOR_RECHECKED_IDENTITY, observed_identity=observed,
        error=mismatch, note=note,
        evidence={"binding": job.identity, "observed": observed, "matches": not mismatch},
    )


def retry_reconciliation(batch: Batch, job: Job, attempt: Attempt, *, by: By, note: str) -> None:
    """Back to the reconciler now, with a fresh bound of checks."""
    batch.update_job(job, next_check_at=None, check_count=0)
    batch.transition(job, attempt, **by.fields, kind=EventKind.OPERATOR_RETRIED_RECONCILIATION,
                     job_status=JobStatus.NEEDS_RECONCILIATION, note=note)
    trigger_reconciliation()  # also when the job was already waiting for it


def retry_failed(batch: Batch, job: Job, attempt: Attempt, *, by: By, note: str, payload: dict | None = None,
                 approval_reason: str) -> str:
    """A failed job runs once more with the same key, beyond the policy's number of attempts (a
    person decided it). A corrected `payload` replaces the job's, its before and after recorded
    under the person's name. A reversible action's attempt is queued now; an irreversible one
    waits for a second person's approval, which binds the payload as corrected. Returns
    "replayed" or "awaiting_approval"."""
    retry = {"attempt": attempt.number, "payload_corrected": payload is not None}
    if payload is not None:
        before = job.payload
        batch.update_job(job, payload=payload)
        batch.record_unchanged(
            job, attempt, **by.fields, kind=EventKind.OPERATOR_CORRECTED_PAYLOAD, note=note,
            evidence={"before": before, "after": payload, "changed": _changed_keys(before, payload)},
        )
    batch.transition(job, attempt, **by.fields, kind=EventKind.OPERATOR_RETRIED_FAILED, note=note, evidence=retry)
    if policy_of(job).reversible:  # as declared when the job was enqueued
        batch.open_next_attempt(job, attempt, **by.fields, note=f"retry with the same key: {note}", one_more=True)
        return "replayed"
    open_approval_request(
        batch, job, attempt, requested_by=by.user, **by.fields, reason=approval_reason,
        evidence={"retry_of_failed_job": {**retry, "by": by.actor, "note": note, "attempt_error": attempt.error},
                  **({"payload_before": before, "payload_after": payload} if payload is not None else {})},
    )
    return "awaiting_approval"


def close_failed(batch: Batch, job: Job, attempt: Attempt, *, by: By, note: str) -> None:
    """The failure stands: no more attempts (the job becomes cancelled, its attempt stays failed)."""
    batch.transition(job, attempt, **by.fields, kind=EventKind.OPERATOR_CLOSED_FAILED,
                     job_status=JobStatus.CANCELLED, note=note)


def _changed_keys(before: dict, after: dict) -> list[str]:
    return sorted(key for key in before.keys() | after.keys() if before.get(key, ...) != after.get(key, ...))


def _resolved(batch: Batch, job: Job) -> None:
    """Reconciliation and any recovery hold are over for this job."""
    batch.update_job(job, next_check_at=None, check_count=0, recovery_pending=False)


def _closing_queued(attempt: Attempt, note: str) -> dict:
    """A queued attempt held for recovery did nothing: it is closed. An unknown one stays unknown."""
    if attempt.execution_state == Execution.NOT_STARTED:
        return {"execution_state": Execution.FAILED, "error": note}
    return {}


def _person_behind(job: Job, attempt: Attempt):
    """The person whose action led to what the reconciler asks approval for: the operator whose
    "Retry reconciliation" sent this attempt back to the reconciler, or else the issuer of the
    worker token whose worker or agent began the attempt (the event is append-only, and its actor
    names the token)."""
    actors = {kind: (actor, at) for kind, actor, at in
              LedgerEvent.objects.filter(job=job, attempt=attempt, kind__in=[
                  EventKind.OPERATOR_RETRIED_RECONCILIATION, EventKind.SIDE_EFFECT_STARTED])
              .order_by("id").values_list("kind", "actor", "at")}
    retried = actors.get(EventKind.OPERATOR_RETRIED_RECONCILIATION)
    if retried is not None:
        return account_named(*retried)  # who had the name then: a rename since changes nothing
    began = actors.get(EventKind.SIDE_EFFECT_STARTED)
    return token_issuer(began[0]) if began else None
