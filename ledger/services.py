"""The transition layer: the only code that changes a job or an attempt.

Every function is atomic, takes the job's row lock first (so one job's changes are serial and
never deadlock), and writes its LedgerEvent in the same transaction as the change. Refusals
(a duplicate delivery, a late write) are recorded too: the event is committed, then the caller
gets a clear exception.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import DateTimeField, F, Func
from django.db.models.functions import Now

from ledger.actions import get_action
from ledger.models import Attempt, Job, LedgerEvent
from ledger.states import FINISHED_JOB, ActorType, Delivery, Execution, JobStatus, SideEffect


class LedgerError(Exception):
    """A refused operation. The ledger is unchanged except for the event recording the refusal."""


class InvalidJob(LedgerError):
    pass


class JobConflict(LedgerError):
    pass


class ClaimRefused(LedgerError):
    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


class StaleLease(LedgerError):
    """A write by a worker whose lease is no longer the current one: rejected and recorded."""


class IdentityMismatch(LedgerError):
    pass


class ClockTimestamp(Func):
    """The database clock, advancing within a transaction (unlike now())."""

    template = "clock_timestamp()"
    output_field = DateTimeField()


@dataclass(frozen=True)
class Lease:
    job_id: str
    attempt_id: int
    attempt_number: int
    owner: str
    token: int
    expires_at: datetime


@dataclass
class SweepResult:
    reclaimed: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    exhausted: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return len(self.reclaimed) + len(self.unknown) + len(self.exhausted)


def idempotency_key_for(*, action: str, job_id: str) -> str:
    return f"{action}:{job_id}"


# --- enqueue -------------------------------------------------------------------------------

def enqueue_job(*, job_id: str, tenant: str, action: str, payload, identity=None,
                actor: str = "system", actor_type: str = ActorType.SYSTEM) -> Job:
    """Create a job and its first attempt; idempotent on `job_id`."""
    job_id, tenant = _clean_text("job_id", job_id, 200), _clean_text("tenant", tenant, 100)
    get_action(action)  # raises UnknownAction with the list of known ones
    payload = _json_object("payload", payload)
    identity = _json_object("identity", identity or {})
    try:
        with transaction.atomic():
            job = Job.objects.create(job_id=job_id, tenant=tenant, action=action, payload=payload,
                                     identity=identity,
                                     idempotency_key=idempotency_key_for(action=action, job_id=job_id))
            attempt = Attempt.objects.create(job=job, number=1)
            _event(job, attempt, actor_type=actor_type, actor=actor, kind="enqueued",
                   before={}, after=_snapshot(job, attempt))
            _dispatch(job)
            return job
    except IntegrityError:
        pass  # the job exists (perhaps created concurrently): compare and return it
    with transaction.atomic():
        job = Job.objects.select_for_update().get(job_id=job_id)
        differing = [name for name, value in (("tenant", tenant), ("action", action),
                                              ("payload", payload), ("identity", identity))
                     if getattr(job, name) != value]
        if differing:
            raise JobConflict(f"job {job_id!r} already exists with a different "
                              f"{', '.join(differing)}; a job id may be reused only for the same work")
        _event(job, None, actor_type=actor_type, actor=actor, kind="enqueue_repeated",
               before={"job": job.status}, after={"job": job.status},
               note="the same job was enqueued again; the existing job is returned")
    return job


def _clean_text(name: str, value, limit: int) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidJob(f"{name} must be a non-empty string")
    value = value.strip()
    if len(value) > limit:
        raise InvalidJob(f"{name} is longer than {limit} characters")
    return value


def _json_object(name: str, value) -> dict:
    if isinstance(value, (str, bytes)):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise InvalidJob(f"{name} is not valid JSON: {exc}") from None
    try:
        value = json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise InvalidJob(f"{name} must be JSON-serialisable: {exc}") from None
    if not isinstance(value, dict):
        raise InvalidJob(f"{name} must be a JSON object, got {type(value).__name__}")
    return value


# --- the worker loop -----------------------------------------------------------------------

def claim_job(*, job_id: str, worker: str) -> Lease:
    """Lease the job's queued attempt for `worker`, with the next fencing token."""
    refusal: ClaimRefused | None = None
    with transaction.atomic():
        job = _locked_job(job_id=job_id)
        attempt = _latest_attempt(job)
        now = job.db_now
        live_lease = attempt.execution_state == Execution.RUNNING and attempt.lease_expires_at > now
        if job.status in FINISHED_JOB or live_lease:
            why = f"job is {job.status}" if not live_lease else (
                f"attempt {attempt.number} is leased to {attempt.lease_owner} "
                f"(token {attempt.lease_token}) until {attempt.lease_expires_at.isoformat()}")
            refusal = ClaimRefused("duplicate_delivery", f"duplicate delivery refused: {why}")
            _event(job, attempt, actor_type=ActorType.WORKER, actor=worker, kind="duplicate_delivery",
                   before=_snapshot(job, attempt), after=_snapshot(job, attempt), note=str(refusal),
                   evidence={"reason": "job_finished" if not live_lease else "live_lease"})
        else:
            if attempt.execution_state == Execution.RUNNING:  # an expired lease
                _expire_lease(job, attempt, actor=worker, actor_type=ActorType.WORKER)
                attempt = _latest_attempt(job)
            if attempt.execution_state == Execution.NOT_STARTED:
                return _lease(job, attempt, worker=worker, now=now)
            if job.status in FINISHED_JOB:
                refusal = ClaimRefused("attempts_exhausted", f"job {job_id} has used all its attempts")
            else:
                refusal = _refuse_claim(job, attempt, worker)
    raise refusal


def _refuse_claim(job: Job, attempt: Attempt, worker: str) -> ClaimRefused:
    if attempt.execution_state == Execution.UNKNOWN:
        reason, message = "previous_attempt_unknown", (
            f"attempt {attempt.number} is unknown: no retry until it is reconciled")
    elif attempt.execution_state == Execution.BLOCKED:
        reason, message = "attempt_blocked", f"attempt {attempt.number} is blocked: {attempt.error}"
    else:
        reason, message = "not_claimable", f"job is {job.status}; no attempt is queued"
    _event(job, attempt, actor_type=ActorType.WORKER, actor=worker, kind="claim_refused",
           before=_snapshot(job, attempt), after=_snapshot(job, attempt), note=message,
           evidence={"reason": reason})
    return ClaimRefused(reason, message)


def _lease(job: Job, attempt: Attempt, *, worker: str, now: datetime) -> Lease:
    ttl = get_action(job.action).lease_ttl
    job.lease_seq += 1
    Job.objects.filter(pk=job.pk).update(lease_seq=job.lease_seq)
    _transition(job, attempt, actor_type=ActorType.WORKER, actor=worker, kind="claimed",
                job_status=JobStatus.RUNNING, delivery_state=Delivery.LEASED,
                execution_state=Execution.RUNNING, lease_owner=worker, lease_token=job.lease_seq,
                lease_expires_at=now + ttl, heartbeat_at=now,
                evidence={"fencing_token": job.lease_seq, "lease_ttl_s": ttl.total_seconds()})
    return _lease_of(job, attempt)


def renew_lease(*, lease: Lease) -> Lease:
    """Extend a lease that is still ours and still valid; a stale one is rejected."""
    with transaction.atomic():
        job, attempt, stale = _held(lease, "renew_lease", require_unexpired=True)
        if not stale:
            expires = job.db_now + get_action(job.action).lease_ttl
            Attempt.objects.filter(pk=attempt.pk, lease_token=lease.token).update(
                lease_expires_at=expires, heartbeat_at=job.db_now, updated_at=Now())
            attempt.lease_expires_at, attempt.heartbeat_at = expires, job.db_now
            _event(job, attempt, actor_type=ActorType.WORKER, actor=lease.owner, kind="lease_renewed",
                   before=_snapshot(job, attempt), after=_snapshot(job, attempt),
                   evidence={"fencing_token": lease.token, "expires_at": expires.isoformat()})
    if stale:
        raise StaleLease(stale)
    return _lease_of(job, attempt)


def verify_identity(*, lease: Lease, observed: dict) -> Attempt:
    """Record who the worker really runs as; a mismatch with the job's binding blocks it."""
    observed = _json_object("observed identity", observed)
    with transaction.atomic():
        job, attempt, stale = _held(lease, "verify_identity", require_unexpired=True)
        if not stale:
            mismatched = {k: {"expected": v, "observed": observed.get(k)}
                          for k, v in job.identity.items() if observed.get(k) != v}
            if mismatched:
                note = "identity mismatch: " + ", ".join(
                    f"{k} is {d['observed']!r}, job is bound to {d['expected']!r}" for k, d in mismatched.items())
                _transition(job, attempt, actor_type=ActorType.WORKER, actor=lease.owner,
                            kind="identity_mismatch", job_status=JobStatus.BLOCKED,
                            delivery_state=Delivery.ACKNOWLEDGED, execution_state=Execution.BLOCKED,
                            observed_identity=observed, error=note, note=note,
                            evidence={"binding": job.identity, "observed": observed})
            else:
                _transition(job, attempt, actor_type=ActorType.WORKER, actor=lease.owner,
                            kind="identity_verified", observed_identity=observed,
                            evidence={"binding": job.identity, "observed": observed})
    if stale:
        raise StaleLease(stale)
    if mismatched:
        raise IdentityMismatch(note)
    return attempt


def begin_side_effect(*, lease: Lease) -> Attempt:
    """Compare-and-set to `submitted`: only after this may the caller touch the outside world."""
    with transaction.atomic():
        job, attempt, stale = _held(lease, "begin_side_effect", require_unexpired=True)
        if not stale:
            if attempt.side_effect_state != SideEffect.NOT_ATTEMPTED:
                raise LedgerError(f"attempt {attempt.number}: side effect already {attempt.side_effect_state}")
            if job.identity and attempt.observed_identity is None:
                raise LedgerError(f"job {job.job_id} is bound to an identity: verify it before any side effect")
            _transition(job, attempt, actor_type=ActorType.WORKER, actor=lease.owner,
                        kind="side_effect_started", side_effect_state=SideEffect.SUBMITTED,
                        heartbeat_at=job.db_now, evidence={"idempotency_key": job.idempotency_key})
    if stale:
        raise StaleLease(stale)
    return attempt


def record_success(*, lease: Lease, result_ref: str = "", evidence: dict | None = None) -> Attempt:
    return _record_result(lease, "record_success", evidence, result_ref=result_ref)


def record_failure(*, lease: Lease, error: str, retryable: bool = False,
                   evidence: dict | None = None) -> Attempt:
    """A definitive refusal: the provider proved that nothing happened."""
    return _record_result(lease, "record_failure", evidence, error=error, retryable=retryable)


def record_unknown(*, lease: Lease, reason: str, evidence: dict | None = None) -> Attempt:
    """The worker lost the ability to observe whether the effect happened."""
    return _record_result(lease, "record_unknown", evidence, error=reason)


def _record_result(lease: Lease, operation: str, evidence: dict | None, *, result_ref: str = "",
                   error: str = "", retryable: bool = False) -> Attempt:
    evidence = evidence or {}
    with transaction.atomic():
        job, attempt, stale = _held(lease, operation, require_unexpired=False, evidence=evidence)
        if not stale:
            submitted = attempt.side_effect_state == SideEffect.SUBMITTED
            if operation == "record_success":
                if not submitted:
                    raise LedgerError("record_success before begin_side_effect: nothing was submitted")
                _transition(job, attempt, actor_type=ActorType.WORKER, actor=lease.owner,
                            kind="succeeded", job_status=JobStatus.SUCCEEDED,
                            delivery_state=Delivery.ACKNOWLEDGED, execution_state=Execution.SUCCEEDED,
                            side_effect_state=SideEffect.CONFIRMED, result_ref=result_ref[:500],
                            evidence=evidence)
            elif operation == "record_unknown":
                if not submitted:
                    raise LedgerError("record_unknown before begin_side_effect: nothing can have happened")
                _transition(job, attempt, actor_type=ActorType.WORKER, actor=lease.owner,
                            kind="observation_lost", job_status=JobStatus.NEEDS_RECONCILIATION,
                            delivery_state=Delivery.ACKNOWLEDGED, execution_state=Execution.UNKNOWN,
                            side_effect_state=SideEffect.AMBIGUOUS, error=error, note=error,
                            evidence=evidence)
            else:
                _transition(job, attempt, actor_type=ActorType.WORKER, actor=lease.owner,
                            kind="failed", job_status=None if retryable else JobStatus.FAILED,
                            delivery_state=Delivery.ACKNOWLEDGED, execution_state=Execution.FAILED,
                            side_effect_state=SideEffect.NOT_FOUND if submitted else SideEffect.NOT_ATTEMPTED,
                            error=error, note=error, evidence={**evidence, "retryable": retryable})
                if retryable:
                    open_next_attempt(job, attempt, actor=lease.owner, actor_type=ActorType.WORKER)
    if stale:
        raise StaleLease(stale)
    return attempt


# --- the lease sweeper ---------------------------------------------------------------------

def sweep_expired_leases(*, limit: int = 500, actor: str = "lease-sweeper") -> SweepResult:
    """Expired + not_attempted -> next attempt; expired + submitted -> unknown, reconcile."""
    result = SweepResult()
    due = list(Attempt.objects.filter(execution_state=Execution.RUNNING, lease_expires_at__lt=ClockTimestamp())
               .order_by("lease_expires_at").values_list("job__job_id", flat=True)[:limit])
    for job_id in due:
        with transaction.atomic():
            job = _locked_job(job_id=job_id, skip_locked=True)
            if job is None:
                continue  # a worker or another sweeper holds it right now
            attempt = _latest_attempt(job)
            if attempt.execution_state != Execution.RUNNING or attempt.lease_expires_at >= job.db_now:
                continue  # renewed or finished since we looked
            lost_effect = attempt.side_effect_state == SideEffect.SUBMITTED
            next_attempt = _expire_lease(job, attempt, actor=actor, actor_type=ActorType.SYSTEM)
            if lost_effect:
                result.unknown.append(job_id)
            elif next_attempt is None:
                result.exhausted.append(job_id)
            else:
                _dispatch(job)
                result.reclaimed.append(job_id)
    return result


def _expire_lease(job: Job, attempt: Attempt, *, actor: str, actor_type: str) -> Attempt | None:
    """Handle an expired lease: dead-letter and reopen, or mark unknown. Returns the queued attempt."""
    expired = {"lease_owner": attempt.lease_owner, "fencing_token": attempt.lease_token,
               "lease_expires_at": attempt.lease_expires_at.isoformat()}
    if attempt.side_effect_state == SideEffect.SUBMITTED:
        note = (f"lease of {attempt.lease_owner} expired after the side effect was submitted: "
                "whether it happened is unknown")
        _transition(job, attempt, actor_type=actor_type, actor=actor, kind="lease_expired_unknown",
                    job_status=JobStatus.NEEDS_RECONCILIATION, delivery_state=Delivery.DEAD_LETTERED,
                    execution_state=Execution.UNKNOWN, side_effect_state=SideEffect.AMBIGUOUS,
                    error=note, note=note, evidence=expired)
        return None
    note = f"lease of {attempt.lease_owner} expired before any side effect; safe to run again"
    _transition(job, attempt, actor_type=actor_type, actor=actor, kind="lease_expired_reclaimed",
                delivery_state=Delivery.DEAD_LETTERED,
                execution_state=Execution.FAILED, error=note, note=note, evidence=expired)
    return open_next_attempt(job, attempt, actor=actor, actor_type=actor_type)


def open_next_attempt(job: Job, previous: Attempt, *, actor: str, actor_type: str,
                      note: str = "") -> Attempt | None:
    """Queue the next attempt with the same idempotency key, or fail the job when none is left.

    The caller holds the job lock and has already closed `previous` (no live attempt remains).
    """
    action = get_action(job.action)
    if previous.number >= action.max_attempts:
        _set_job_status(job, JobStatus.FAILED)
        _event(job, previous, actor_type=actor_type, actor=actor, kind="attempts_exhausted",
               before=_snapshot(job, previous), after=_snapshot(job, previous),
               note=f"all {action.max_attempts} attempts used; the job has failed")
        return None
    attempt = Attempt.objects.create(job=job, number=previous.number + 1)
    before = {"job": job.status}
    _set_job_status(job, JobStatus.PENDING)
    _event(job, attempt, actor_type=actor_type, actor=actor, kind="attempt_opened", before=before,
           after=_snapshot(job, attempt), note=note or f"attempt {attempt.number} queued with the same key",
           evidence={"idempotency_key": job.idempotency_key, "previous_attempt": previous.number})
    return attempt


# --- shared mechanics ----------------------------------------------------------------------

def _locked_job(*, job_id: str, skip_locked: bool = False) -> Job | None:
    query = Job.objects.select_for_update(skip_locked=skip_locked).annotate(db_now=ClockTimestamp())
    if skip_locked:
        return query.filter(job_id=job_id).first()
    try:
        return query.get(job_id=job_id)
    except Job.DoesNotExist:
        raise LedgerError(f"no job with id {job_id!r}") from None


def _latest_attempt(job: Job) -> Attempt:
    return Attempt.objects.filter(job=job).order_by("-number").first()


def _held(lease: Lease, operation: str, *, require_unexpired: bool,
          evidence: dict | None = None) -> tuple[Job, Attempt, str]:
    """Lock the job and check the lease is still this attempt's current one.

    Returns (job, attempt, "") when it is; otherwise records `late_write_rejected` and returns
    the reason as the third element.
    """
    job = _locked_job(job_id=lease.job_id)
    attempt = Attempt.objects.get(pk=lease.attempt_id)
    current = (attempt.execution_state == Execution.RUNNING and attempt.lease_owner == lease.owner
               and attempt.lease_token == lease.token)
    if current and require_unexpired and attempt.lease_expires_at <= job.db_now:
        current = False
    if current:
        return job, attempt, ""
    expired = attempt.lease_token == lease.token and attempt.lease_expires_at <= job.db_now
    note = (f"{operation} by {lease.owner} with fencing token {lease.token} rejected: "
            f"attempt {attempt.number} is {attempt.execution_state}"
            + (", its lease expired" if expired and attempt.execution_state == Execution.RUNNING else "")
            + f"; the job's latest fencing token is {job.lease_seq}")
    _event(job, attempt, actor_type=ActorType.WORKER, actor=lease.owner, kind="late_write_rejected",
           before=_snapshot(job, attempt), after=_snapshot(job, attempt), note=note,
           evidence={"operation": operation, "stale_token": lease.token,
                     "current_token": job.lease_seq, "reported": evidence or {}})
    return job, attempt, note


def _transition(job: Job, attempt: Attempt, *, actor_type: str, actor: str, kind: str,
                job_status: str | None = None, note: str = "", evidence: dict | None = None,
                **attempt_fields) -> LedgerEvent:
    """Change the attempt (compare-and-set on its version) and the job, and record the event."""
    before = _snapshot(job, attempt)
    changed = Attempt.objects.filter(pk=attempt.pk, version=attempt.version).update(
        version=F("version") + 1, updated_at=Now(), **attempt_fields)
    if changed != 1:
        raise RuntimeError(f"attempt {attempt.pk} changed under the job lock; this is a bug")
    for name, value in attempt_fields.items():
        setattr(attempt, name, value)
    attempt.version += 1
    if job_status:
        _set_job_status(job, job_status)
    return _event(job, attempt, actor_type=actor_type, actor=actor, kind=kind, before=before,
                  after=_snapshot(job, attempt), note=note, evidence=evidence or {})


def _set_job_status(job: Job, status: str) -> None:
    if job.status != status:
        Job.objects.filter(pk=job.pk).update(status=status, updated_at=Now())
        job.status = status


def _snapshot(job: Job, attempt: Attempt | None) -> dict:
    snapshot = {"job": job.status}
    if attempt is not None:
        snapshot |= {"attempt": attempt.number, **attempt.states}
    return snapshot


def _event(job: Job, attempt: Attempt | None, *, actor_type: str, actor: str, kind: str, before: dict,
           after: dict, note: str = "", evidence: dict | None = None) -> LedgerEvent:
    return LedgerEvent.objects.create(job=job, attempt=attempt, actor_type=actor_type, actor=actor[:200],
                                      kind=kind, before=before, after=after, note=note,
                                      evidence=evidence or {})


def _lease_of(job: Job, attempt: Attempt) -> Lease:
    return Lease(job_id=job.job_id, attempt_id=attempt.pk, attempt_number=attempt.number,
                 owner=attempt.lease_owner, token=attempt.lease_token, expires_at=attempt.lease_expires_at)


def _dispatch(job: Job) -> None:
    """Hand the job to a django-q2 worker once this transaction has committed."""
    if settings.RECKON_DISPATCH:
        job_id = job.job_id
        transaction.on_commit(lambda: _enqueue_run(job_id))


def _enqueue_run(job_id: str) -> None:
    from django_q.tasks import async_task

    async_task("ledger.tasks.run_job", job_id, task_name=f"run_job:{job_id}"[:100])
