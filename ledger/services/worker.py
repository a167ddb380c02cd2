"""The worker loop's transitions: claim, renew, identity, begin side effect, results.

Writes after the claim are compare-and-sets on the lease's owner and fencing token; a stale
one changes nothing, records `late_write_rejected`, and raises StaleLease.

Each step is one function, whoever calls it (a django-q2 worker, the HTTP API, the MCP gateway):
claim, begin and success first try their database function in one round trip (ledger.fastpath),
and take the Python path below when it declines. A caller acting within a scope of tenants and
actions (the API's token) passes it: a job outside it is refused as NotInScope, untouched.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import connection, transaction

from ledger import endpoints, fastpath
from ledger.actions import declared_action, get_action, is_gateway_action, policy_of
from ledger.gate import Gate, gate_status
from ledger.models import Attempt, Job, LedgerEvent
from ledger.moments import kept_time
from ledger.scope import EVERYTHING, Scope
from ledger.services.errors import (
    ClaimRefused,
    GateClosed,
    IdentityMismatch,
    InvalidJob,
    LedgerError,
    NotInScope,
    StaleLease,
)
from ledger.services.jobs import checked_job, idempotency_key_for, json_object, refused_if_archived
from ledger.services.sweeper import expire_lease, first_look
from ledger.services.transitions import Batch, latest_attempt, lock_job, record_refusal, transition
from ledger.states import FINISHED_JOB, ActorType, Delivery, EventKind, Execution, JobStatus, SideEffect


@dataclass(frozen=True)
class Lease:
    """What a claim hands the worker: every later write is a compare-and-set on owner and token."""

    job_id: str
    attempt_id: int | None  # None: the attempt leased with `token` (a caller that knows only the token)
    attempt_number: int | None
    owner: str
    token: int
    expires_at: datetime | None
    # The job as the claim left it, when the claim's statement read it (the API answers with it).
    job: Job | None = field(default=None, compare=False, repr=False)


RECOVERY_REFUSAL = (
    "job {job} is under recovery after a restore of the ledger: no new side effect until "
    "reconciliation has looked it up at the provider"
)


def claim_job(*, job_id: str, worker: str, scope: Scope = EVERYTHING) -> Lease:
    """Lease the job's queued attempt for `worker`, with the next fencing token."""
    claimed = fastpath.claim(job_id=job_id, worker=worker, scope=scope)
    if claimed is not None:
        job, leased = claimed
        return Lease(job_id, *leased, job=job)
    check_scope(job_id, scope)
    refusal: ClaimRefused | None = None
    with transaction.atomic():
        job = lock_job(job_id=job_id)
        attempt = latest_attempt(job)
        now = job.db_now
        live_lease = attempt.execution_state == Execution.RUNNING and attempt.lease_expires_at > now
        if job.status in FINISHED_JOB or live_lease:
            why = (
                f"job is {job.status}"
                if not live_lease
                # Not naming the holder: the refused caller may be another token's worker.
                else f"attempt {attempt.number} is leased until {kept_time(attempt.lease_expires_at)}"
            )
            refusal = ClaimRefused("duplicate_delivery", f"duplicate delivery refused: {why}")
            reason = "job_finished" if not live_lease else "live_lease"
            with Batch() as batch:  # a counted signal, committed before the refusal is raised
                batch.update_job(job, duplicate_deliveries=job.duplicate_deliveries + 1)
                if _first_refusal(job, attempt, EventKind.DUPLICATE_DELIVERY, reason, worker):
                    batch.record_unchanged(
                        job,
                        attempt,
                        actor_type=ActorType.WORKER,
                        actor=worker,
                        kind=EventKind.DUPLICATE_DELIVERY,
                        note=str(refusal),
                        evidence={"reason": reason, "lease_owner": attempt.lease_owner,
                                  "fencing_token": attempt.lease_token},
                    )
        else:
            if attempt.execution_state == Execution.RUNNING:  # an expired lease
                expire_lease(job, attempt, actor=worker, actor_type=ActorType.WORKER, dispatch=False)
                attempt = latest_attempt(job)
            gate = _gate_for(job)
            if attempt.execution_state == Execution.NOT_STARTED and not job.recovery_pending and gate.open:
                return _lease(job, attempt, worker=worker, now=now)
            if job.status in FINISHED_JOB:
                refusal = ClaimRefused("attempts_exhausted", f"job {job_id} has used all its attempts")
            else:
                refusal = _refuse_claim(job, attempt, worker, gate)
    raise refusal


def _refuse_claim(job: Job, attempt: Attempt, worker: str, gate: Gate) -> ClaimRefused:
    batch = Batch()
    if not gate.open and attempt.execution_state == Execution.NOT_STARTED:
        reason, message = "dead_man_gate", f"dead-man gate: {gate.reason}"
        batch.update_job(job, touch=True, gated_at=job.db_now)  # released when the gate reopens
    elif job.recovery_pending:
        reason, message = "under_recovery", RECOVERY_REFUSAL.format(job=job.job_id)
    elif attempt.execution_state == Execution.UNKNOWN:
        reason, message = (
            "previous_attempt_unknown",
            (f"attempt {attempt.number} is unknown: no retry until it is reconciled"),
        )
    elif attempt.execution_state == Execution.BLOCKED:
        reason, message = "attempt_blocked", f"attempt {attempt.number} is blocked: {attempt.error}"
    else:
        reason, message = "not_claimable", f"job is {job.status}; no attempt is queued"
    batch.update_job(job, claims_refused=job.claims_refused + 1)
    if _first_refusal(job, attempt, EventKind.CLAIM_REFUSED, reason, worker):
        batch.record_unchanged(
            job,
            attempt,
            actor_type=ActorType.WORKER,
            actor=worker,
            kind=EventKind.CLAIM_REFUSED,
            note=message,
            evidence={"reason": reason},
        )
    batch.flush()  # committed before the refusal is raised
    return ClaimRefused(reason, message)


def _first_refusal(job: Job, attempt: Attempt, kind: EventKind, reason: str, worker: str) -> bool:
    """Is this the first refusal of its kind and reason for this attempt and this worker? Only the
    first is written to the history (who was refused, and why); every one is counted on the job (a
    retry loop that asks again and again would otherwise fill the history with the same refusal)."""
    return not LedgerEvent.objects.filter(job=job, attempt=attempt, kind=kind, actor=worker,
                                          evidence__reason=reason).exists()


def _lease(job: Job, attempt: Attempt, *, worker: str, now: datetime) -> Lease:
    ttl = get_action(job.action).lease_ttl
    token = job.lease_seq + 1
    transition(
        job,
        attempt,
        actor_type=ActorType.WORKER,
        actor=worker,
        kind=EventKind.CLAIMED,
        job_status=JobStatus.RUNNING,
        job_fields={"lease_seq": token},
        delivery_state=Delivery.LEASED,
        execution_state=Execution.RUNNING,
        lease_owner=worker,
        lease_token=token,
        lease_expires_at=now + ttl,
        heartbeat_at=now,
        evidence={"fencing_token": token, "lease_ttl_s": ttl.total_seconds()},
    )
    return _lease_of(job, attempt)


def renew_lease(*, lease: Lease) -> Lease:
    """Extend a lease that is still ours and still valid; a stale one is rejected."""

    def renew(job: Job, attempt: Attempt) -> None:
        expires = job.db_now + get_action(job.action).lease_ttl
        transition(job, attempt, **_by(lease), kind=EventKind.LEASE_RENEWED, lease_expires_at=expires,
                   heartbeat_at=job.db_now, evidence={"fencing_token": lease.token, "expires_at": expires.isoformat()})

    attempt, _ = _while_held(lease, "renew_lease", renew, require_unexpired=True)
    return _lease_of(attempt.job, attempt)


def verify_identity(*, lease: Lease, observed: dict) -> Attempt:
    """Record who the worker really runs as; a mismatch with the job's binding blocks it."""
    observed = json_object("observed identity", observed)

    def verify(job: Job, attempt: Attempt) -> str:
        if attempt.side_effect_state != SideEffect.NOT_ATTEMPTED:
            raise LedgerError(
                f"attempt {attempt.number}: identity must be verified before the side effect begins "
                f"(it is already {attempt.side_effect_state})"
            )
        evidence = {"binding": job.identity, "observed": observed}
        note = identity_mismatch(job.identity, observed)
        if not note:
            transition(job, attempt, **_by(lease), kind=EventKind.IDENTITY_VERIFIED, observed_identity=observed,
                       evidence=evidence)
            return ""
        transition(job, attempt, **_by(lease), kind=EventKind.IDENTITY_MISMATCH, job_status=JobStatus.BLOCKED,
                   delivery_state=Delivery.ACKNOWLEDGED, execution_state=Execution.BLOCKED,
                   observed_identity=observed, error=note, note=note, evidence=evidence)
        return note

    attempt, mismatch = _while_held(lease, "verify_identity", verify, require_unexpired=True)
    if mismatch:
        raise IdentityMismatch(mismatch)
    return attempt


def identity_mismatch(binding: dict, observed: dict | None) -> str:
    """How `observed` differs from the job's binding, in a sentence; "" when every bound field matches."""
    observed = observed or {}
    mismatched = {k: (v, observed.get(k)) for k, v in binding.items() if observed.get(k) != v}
    if not mismatched:
        return ""
    return "identity mismatch: " + ", ".join(
        f"{k} is {seen!r}, job is bound to {expected!r}" for k, (expected, seen) in mismatched.items()
    )


def begin_side_effect(*, lease: Lease, sent_to: str | None = None, scope: Scope = EVERYTHING) -> Attempt:
    """Compare-and-set to `submitted`: only after this may the caller touch the outside world.

    `sent_to`: where the effect is about to go (the provider's endpoint or account, as this worker
    is configured; ledger.endpoints), recorded on the attempt for the reconciler to compare."""
    sent_to = recorded_sent_to(sent_to)
    attempt = fastpath.begin(job_id=lease.job_id, attempt_id=lease.attempt_id, owner=lease.owner,
                             token=lease.token, sent_to=sent_to, scope=scope)
    if attempt is not None:
        return attempt
    lease = resolved(lease, scope)

    def begin(job: Job, attempt: Attempt) -> str:
        if job.recovery_pending:
            raise LedgerError(RECOVERY_REFUSAL.format(job=job.job_id))
        if attempt.side_effect_state != SideEffect.NOT_ATTEMPTED:
            raise LedgerError(f"attempt {attempt.number}: side effect already {attempt.side_effect_state}")
        if job.identity and attempt.observed_identity is None:
            raise LedgerError(f"job {job.job_id} is bound to an identity: verify it before any side effect")
        gate = _gate_for(job)
        if gate.open:
            transition(job, attempt, **_by(lease), kind=EventKind.SIDE_EFFECT_STARTED,
                       side_effect_state=SideEffect.SUBMITTED, heartbeat_at=job.db_now, sent_to=sent_to,
                       evidence={"idempotency_key": job.idempotency_key, **({"sent_to": sent_to} if sent_to else {})})
            return ""
        # Hand the attempt back to the queue; the gate dispatches it again when it reopens.
        held = f"dead-man gate: {gate.reason}; attempt {attempt.number} goes back to the queue"
        transition(job, attempt, **_by(lease), kind=EventKind.SIDE_EFFECT_HELD, job_status=JobStatus.PENDING,
                   job_fields={"gated_at": job.db_now}, delivery_state=Delivery.QUEUED,
                   execution_state=Execution.NOT_STARTED, lease_owner="", lease_token=None,
                   lease_expires_at=None, note=held, evidence={"gate": gate.reason, "released_token": lease.token})
        return held

    attempt, held = _while_held(lease, "begin_side_effect", begin, require_unexpired=True)
    if held:
        raise GateClosed(held)
    return attempt


def claim_and_begin(*, job_id: str, worker: str, sent_to: str | None = None, scope: Scope = EVERYTHING) -> Lease:
    """claim_job then begin_side_effect, for a caller that begins the effect as soon as it holds the
    lease (the MCP gateway): in the ordinary case both in one round trip, committed durably (the
    caller's transaction, or this statement's own), otherwise each step's own way."""
    sent_to = recorded_sent_to(sent_to)
    claimed = fastpath.claim_begin(job_id=job_id, worker=worker, sent_to=sent_to, scope=scope)
    if claimed is None:
        lease = claim_job(job_id=job_id, worker=worker, scope=scope)
    else:
        job, leased, begun = claimed
        lease = Lease(job_id, *leased, job=job)
        if begun:
            return lease
    begin_side_effect(lease=lease, sent_to=sent_to, scope=scope)
    return lease


def enqueue_claim_and_begin(*, job_id: str, tenant: str, action: str, payload, worker: str,
                            actor_type: str = ActorType.WORKER, sent_to: str | None = None) -> Lease | None:
    """enqueue_job (dispatch=False), then claim_and_begin, for a caller that runs a new job itself at
    once (the MCP gateway): in the ordinary case all three in one round trip and one durable commit.
    The lease; None when the job was not new (or the claim declined): then nothing was begun, and
    the caller takes its general path (enqueue_job finds the job and compares). JobArchived when
    the id was archived: the job table refuses it (ledger.tombstones), and nothing is written."""
    job_id, tenant, declared, payload, identity = checked_job(job_id=job_id, tenant=tenant, action=action,
                                                              payload=payload, identity=None)
    sent_to = recorded_sent_to(sent_to)
    key = idempotency_key_for(action=action, job_id=job_id)
    # In a caller's transaction, a savepoint keeps it usable after a refusal; alone, the statement
    # is its own transaction (one round trip, as the gateway calls it).
    with refused_if_archived(job_id=job_id, key=key), \
            transaction.atomic() if connection.in_atomic_block else nullcontext():
        started = fastpath.enqueue_claim_begin(
            job_id=job_id, tenant=tenant, action=action, payload=payload, identity=identity,
            policy=declared.policy.as_json(), key=key, actor=worker, actor_type=actor_type, worker=worker,
            sent_to=sent_to)
    if started is None:
        return None
    job, leased, begun = started
    lease = Lease(job_id, *leased, job=job)
    if not begun:
        begin_side_effect(lease=lease, sent_to=sent_to)
    return lease


def recorded_sent_to(endpoint: str | None) -> str:
    """`endpoint` as the attempt keeps it (ledger.endpoints.recorded); a bad one is refused."""
    try:
        return endpoints.recorded(endpoint)
    except endpoints.BadEndpoint as exc:  # bad input: refused before anything is written
        raise InvalidJob(str(exc)) from None


def check_scope(job_id: str, scope: Scope) -> None:
    """Refuse a job outside `scope` (or no job at all) before the Python path touches anything."""
    if scope is EVERYTHING:
        return
    found = Job.objects.filter(job_id=job_id).values_list("tenant", "action").first()
    if found is None or not scope.covers(tenant=found[0], action=found[1]):
        raise NotInScope(f"no job {job_id!r} in scope")


# The attempt that issued a fencing token; for a token this job never issued, its latest attempt
# (the step judges the lease against it, and records that).
LEASE_LOOKUP = """
SELECT j.tenant, j.action, a.id, a.number, a.lease_expires_at
FROM ledger_job j CROSS JOIN LATERAL (
    SELECT id, number, lease_expires_at FROM ledger_attempt WHERE job_id = j.id
    ORDER BY lease_token = %s DESC NULLS LAST, number DESC LIMIT 1
) a
WHERE j.job_id = %s
"""


def lease_named(*, job_id: str, owner: str, token: int, scope: Scope = EVERYTHING) -> Lease:
    """The Lease a caller that knows only the job, its name and the fencing token holds, on a job
    in `scope` (NotInScope otherwise), read in one query; each step checks it under the job's lock."""
    with connection.cursor() as cursor:
        cursor.execute(LEASE_LOOKUP, [token, job_id])
        row = cursor.fetchone()
    if row is None or not scope.covers(tenant=row[0], action=row[1]):
        raise NotInScope(f"no job {job_id!r} in scope")
    _, _, attempt_id, number, expires_at = row
    return Lease(job_id=job_id, attempt_id=attempt_id, attempt_number=number, owner=owner, token=token,
                 expires_at=expires_at)


def resolved(lease: Lease, scope: Scope) -> Lease:
    """`lease` with its attempt named, for the Python path; its job checked against `scope`."""
    if lease.attempt_id is None:
        return lease_named(job_id=lease.job_id, owner=lease.owner, token=lease.token, scope=scope)
    check_scope(lease.job_id, scope)
    return lease


def _gate_for(job: Job):
    """The gate only holds irreversible actions; reversible work never asks it."""
    if get_action(job.action).reversible and policy_of(job).reversible:
        return Gate(open=True)
    return gate_status()


def record_success(*, lease: Lease, result_ref: str = "", evidence: dict | None = None,
                   scope: Scope = EVERYTHING) -> Attempt:
    """The provider confirmed the effect."""
    attempt = fastpath.succeed(job_id=lease.job_id, attempt_id=lease.attempt_id, owner=lease.owner,
                               token=lease.token, result_ref=result_ref, evidence=evidence, scope=scope)
    if attempt is not None:
        return attempt
    lease = resolved(lease, scope)

    def succeed(job: Job, attempt: Attempt) -> None:
        if attempt.side_effect_state != SideEffect.SUBMITTED:
            raise LedgerError("record_success before begin_side_effect: nothing was submitted")
        transition(job, attempt, **_by(lease), kind=EventKind.SUCCEEDED, job_status=JobStatus.SUCCEEDED,
                   delivery_state=Delivery.ACKNOWLEDGED, execution_state=Execution.SUCCEEDED,
                   side_effect_state=SideEffect.CONFIRMED, result_ref=result_ref[:500], evidence=evidence)

    return _while_held(lease, "record_success", succeed, evidence=evidence)[0]


def record_failure(
    *, lease: Lease, error: str, retryable: bool = False, evidence: dict | None = None,
    retry_in: float | None = None, probe: bool = False,
) -> Attempt:
    """A definitive refusal: the provider proved that nothing happened. A retryable one queues the
    next attempt to start after the action's backoff, and at least `retry_in` seconds (what the
    provider asked for, or what its open circuit holds): the sweeper dispatches it then.

    `probe`: the call was its provider's circuit probe (the one call a cool-down lets through to
    see whether the provider is back). It failed retryably because the provider is still down, not
    because of this job: it is not counted against the job's attempts."""

    def fail(job: Job, attempt: Attempt) -> None:
        submitted = attempt.side_effect_state == SideEffect.SUBMITTED
        with Batch() as batch:
            batch.transition(
                job, attempt, **_by(lease), kind=EventKind.FAILED, job_status=None if retryable else JobStatus.FAILED,
                delivery_state=Delivery.ACKNOWLEDGED, execution_state=Execution.FAILED,
                side_effect_state=SideEffect.NOT_FOUND if submitted else SideEffect.NOT_ATTEMPTED,
                error=error, note=error, evidence={**(evidence or {}), "retryable": retryable},
            )
            if retryable:
                delay, why = retry_delay(job, attempt.number, retry_in)
                note = (f"attempt {attempt.number + 1} queued with the same key; it starts in {delay:.1f} s ({why})"
                        if delay > 0 else "")
                if probe:
                    note = (f"{note or f'attempt {attempt.number + 1} queued with the same key'}; attempt "
                            f"{attempt.number} was the provider's circuit probe: not counted against the attempts")
                opened = batch.open_next_attempt(job, attempt, **_by(lease), dispatch=delay <= 0, note=note,
                                                 one_more=probe)
                if opened is not None and delay > 0:
                    batch.update_job(job, retry_at=job.db_now + timedelta(seconds=delay))

    return _while_held(lease, "record_failure", fail, evidence=evidence)[0]


def retry_delay(job: Job, failed_attempt: int, retry_in: float | None) -> tuple[float, str]:
    """Seconds before the attempt after `failed_attempt`, and why: the action's backoff (exponential,
    jittered), or what the provider asked for or its circuit holds, whichever is longer. Only for
    the work Reckon dispatches to its workers: workers over HTTP claim what is queued, and the MCP
    gateway's next identical call is the agent's own retry (0: queued at once, as before)."""
    declared = declared_action(job.action)
    if declared is None or declared.external or is_gateway_action(job.action):
        return 0.0, "not dispatched by Reckon"
    backoff = declared.retry_backoff.delay_after(failed_attempt, seed=job.idempotency_key)
    if retry_in is not None and retry_in > backoff:
        return retry_in, f"the provider is not taking calls for {retry_in:.1f} s"
    return backoff, f"backoff after attempt {failed_attempt}"


def hold_for_provider(*, lease: Lease, provider: str, retry_in: float, reason: str) -> Attempt:
    """The provider's circuit is open: hand the attempt back before its side effect, not spent, to
    start again when the circuit lets a call through (the sweeper dispatches it then)."""

    def hold(job: Job, attempt: Attempt) -> None:
        if attempt.side_effect_state != SideEffect.NOT_ATTEMPTED:
            raise LedgerError(f"attempt {attempt.number}: side effect already {attempt.side_effect_state}")
        until = job.db_now + timedelta(seconds=retry_in)
        note = (f"provider {provider} is not taking calls ({reason}): attempt {attempt.number} goes back to the "
                f"queue, not spent, until {kept_time(until)}")
        transition(job, attempt, **_by(lease), kind=EventKind.SIDE_EFFECT_HELD, job_status=JobStatus.PENDING,
                   job_fields={"retry_at": until}, delivery_state=Delivery.QUEUED,
                   execution_state=Execution.NOT_STARTED, lease_owner="", lease_token=None,
                   lease_expires_at=None, note=note,
                   evidence={"provider": provider, "retry_in_s": round(retry_in, 3), "released_token": lease.token})

    return _while_held(lease, "hold_for_provider", hold, require_unexpired=True)[0]


def record_unknown(*, lease: Lease, reason: str, evidence: dict | None = None) -> Attempt:
    """The worker lost the ability to observe whether the effect happened."""

    def lose_sight(job: Job, attempt: Attempt) -> None:
        if attempt.side_effect_state != SideEffect.SUBMITTED:
            raise LedgerError("record_unknown before begin_side_effect: nothing can have happened")
        transition(job, attempt, **_by(lease), kind=EventKind.OBSERVATION_LOST,
                   job_status=JobStatus.NEEDS_RECONCILIATION, job_fields=first_look(job),
                   delivery_state=Delivery.ACKNOWLEDGED,
                   execution_state=Execution.UNKNOWN, side_effect_state=SideEffect.AMBIGUOUS, error=reason,
                   note=reason, evidence=evidence)

    return _while_held(lease, "record_unknown", lose_sight, evidence=evidence)[0]


def _by(lease: Lease) -> dict:
    return {"actor_type": ActorType.WORKER, "actor": lease.owner}


def _while_held(lease: Lease, operation: str, write, *, require_unexpired: bool = False,
                evidence: dict | None = None) -> tuple[Attempt, object]:
    """Lock the job; if `lease` is still its attempt's current lease, `write(job, attempt)` in the
    same transaction. Returns the attempt and what `write` returned. A stale lease changes nothing:
    `late_write_rejected` is recorded, committed, then raised as StaleLease."""
    with transaction.atomic():
        job, attempt, stale = _held(lease, operation, require_unexpired=require_unexpired, evidence=evidence)
        result = None if stale else write(job, attempt)
    if stale:
        raise StaleLease(stale)
    attempt.job = job
    return attempt, result


def _held(
    lease: Lease, operation: str, *, require_unexpired: bool, evidence: dict | None = None
) -> tuple[Job, Attempt, str]:
    """Lock the job and check the lease is still this attempt's current one.

    Returns (job, attempt, "") when it is; otherwise records `late_write_rejected` and returns
    the reason as the third element.
    """
    # Lock first, then read the attempt in a new statement: under READ COMMITTED a row read in
    # the same statement that waited for the lock would come from the snapshot before the wait.
    job = lock_job(job_id=lease.job_id)
    attempt = Attempt.objects.filter(pk=lease.attempt_id, job=job).first()
    if attempt is None:  # a lease that names another job's attempt is no lease of this job
        raise LedgerError(f"attempt {lease.attempt_id} is not an attempt of job {lease.job_id}")
    current = (
        attempt.execution_state == Execution.RUNNING
        and attempt.lease_owner == lease.owner
        and attempt.lease_token == lease.token
    )
    if current and require_unexpired and attempt.lease_expires_at <= job.db_now:
        current = False
    if current:
        return job, attempt, ""
    expired = attempt.lease_token == lease.token and attempt.lease_expires_at <= job.db_now
    note = (
        f"{operation} by {lease.owner} with fencing token {lease.token} rejected: "
        f"attempt {attempt.number} is {attempt.execution_state}"
        + (", its lease expired" if expired and attempt.execution_state == Execution.RUNNING else "")
    )
    record_refusal(
        job,
        attempt,
        actor_type=ActorType.WORKER,
        actor=lease.owner,
        kind=EventKind.LATE_WRITE_REJECTED,
        note=note,
        evidence={
            "operation": operation,
            "stale_token": lease.token,
            "current_token": job.lease_seq,
            "reported": evidence or {},
        },
    )
    return job, attempt, note


def _lease_of(job: Job, attempt: Attempt) -> Lease:
    return Lease(
        job_id=job.job_id,
        attempt_id=attempt.pk,
        attempt_number=attempt.number,
        owner=attempt.lease_owner,
        token=attempt.lease_token,
        expires_at=attempt.lease_expires_at,
    )
