"""One side-effecting tool call, honestly: a Reckon job per idempotency key, a fenced attempt, and
what the agent is told when the ledger already knows (or cannot know) the outcome.

    open_call   enqueue-or-get the key's job; answer from the ledger, or claim and begin the side effect
                (a new key of a reversible tool: all three in one statement, ledger.fastpath)
    close_call  the upstream answered: its result is recorded (success, or the tool's error)
    lose_call   timeout, cancel, dropped connection: unknown, never failed

These run in a worker thread of the gateway (Django's ORM is synchronous) and change the ledger only
through its services; the upstream call itself happens between them, with no transaction open.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass, field

from django.conf import settings
from django.db import transaction
from django.urls import reverse

from api.models import WorkerToken
from approvals.services import open_approval_request
from gateway.config import META_KEY, ToolPolicy, get_upstream
from ledger.actions import GATEWAY_RESULT
from ledger.models import Job, LedgerEvent
from ledger.services import (
    Batch,
    ClaimRefused,
    GateClosed,
    InvalidJob,
    JobConflict,
    Lease,
    LedgerError,
    StaleLease,
    claim_and_begin,
    enqueue_claim_and_begin,
    enqueue_job,
    latest_attempt,
    lock_job,
    record_failure,
    record_success,
    record_unknown,
)
from ledger.states import ActorType, EventKind, Execution, JobStatus

REDACTED = "[redacted]"
RESULT = GATEWAY_RESULT  # the evidence key under which the upstream's result is recorded (the worker API refuses it)
REPLAY_META = "reckon/replay"


@dataclass(frozen=True)
class Answer:
    """What the agent gets: the upstream's result (recorded or fresh), or Reckon's word."""

    content: list[dict]
    is_error: bool = False
    structured: dict | None = None
    meta: dict = field(default_factory=dict)

    @classmethod
    def saying(cls, text: str, *, job: Job | None = None, **meta) -> Answer:
        extra = {"reckon/job": job.job_id, "reckon/status": job.status, "reckon/console": console_link(job)} \
            if job is not None else {}
        return cls([{"type": "text", "text": text}], is_error=True, meta={**extra, **meta})

    @classmethod
    def recorded(cls, result: dict, **meta) -> Answer:
        return cls(result.get("content", []), bool(result.get("isError")), result.get("structuredContent"), meta)


@dataclass(frozen=True)
class Go:
    """The side effect has begun (`submitted`): call the upstream now, then close or lose the call."""

    job_id: str
    lease: Lease
    idempotency_key: str  # passed on to the upstream in the call's _meta


def console_link(job: Job) -> str:
    return settings.RECKON_CONSOLE_URL.rstrip("/") + reverse("job_detail", args=[job.job_id])


def canonical(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def redacted(policy: ToolPolicy, arguments: dict) -> dict:
    return {name: (REDACTED if name in policy.redact else value) for name, value in arguments.items()}


def arguments_digest(arguments: dict) -> str:
    """Tells two calls' full arguments apart without storing them: keyed, so that a redacted
    secret cannot be guessed back from the digest."""
    return hmac.new(settings.SECRET_KEY.encode(), canonical(arguments).encode(), hashlib.sha256).hexdigest()


class Refused(Exception):
    """The call is refused before the ledger is touched; the message says why."""


def job_id_for(policy: ToolPolicy, tenant: str, arguments: dict, meta: dict) -> tuple[str, str]:
    """The call's job id and what its key was made of."""
    if policy.key == "arguments":
        material, made_of = {"tenant": tenant, "tool": policy.name, "arguments": arguments}, "arguments"
    elif policy.key == "meta":
        given = meta.get(META_KEY)
        if not isinstance(given, str) or not given.strip() or len(given) > 200:
            raise Refused(f"tool {policy.name} takes its idempotency key from the call's _meta: "
                          f'pass _meta {{"{META_KEY}": "<key>"}} (a string of at most 200 characters)')
        material, made_of = {"tenant": tenant, "tool": policy.name, "key": given}, f"_meta {META_KEY}"
    else:
        name = policy.key.removeprefix("argument:")
        if not isinstance(arguments.get(name), (str, int)) or isinstance(arguments.get(name), bool):
            raise Refused(f"tool {policy.name} takes its idempotency key from the argument {name!r}, "
                          "which this call lacks (or is not a string or an integer)")
        material, made_of = {"tenant": tenant, "tool": policy.name, "key": arguments[name]}, f"argument {name}"
    return f"mcp:{policy.name}:{hashlib.sha256(canonical(material).encode()).hexdigest()[:40]}", made_of


def open_call(*, token: WorkerToken, policy: ToolPolicy, arguments: dict, meta: dict, agent: str) -> Answer | Go:
    upstream = get_upstream(policy.upstream)
    tenant = upstream.tenant
    if not token.allows(tenant=tenant, action=policy.action):
        raise Refused(f"token {token.name!r} may not call {policy.name} (tenant {tenant}, action {policy.action})")
    job_id, made_of = job_id_for(policy, tenant, arguments, meta)
    payload = {"upstream": policy.upstream, "tool": policy.tool, "arguments": redacted(policy, arguments),
               "arguments_digest": arguments_digest(arguments), "key_made_of": made_of}
    if policy.effect != "irreversible":  # (an irreversible tool may have to ask a person first)
        # A new key, in the ordinary case: enqueued, claimed and begun in one round trip and one
        # durable commit. A key seen before (None) takes the general path below.
        try:
            lease = enqueue_claim_and_begin(job_id=job_id, tenant=tenant, action=policy.action, payload=payload,
                                            worker=agent)
        except InvalidJob as exc:
            raise Refused(str(exc)) from None
        if lease is not None:
            return Go(job_id, lease, lease.job.idempotency_key)
    with transaction.atomic():
        try:
            job = enqueue_job(job_id=job_id, tenant=tenant, action=policy.action, payload=payload,
                              actor=agent, actor_type=ActorType.WORKER, dispatch=False)
        except JobConflict:
            raise Refused(f"the idempotency key of this call ({made_of}) was used before with other arguments: "
                          f"refused, nothing called; job {job_id}") from None
        except InvalidJob as exc:
            raise Refused(str(exc)) from None
        return _answer_or_go(job, policy, agent, token)


def _answer_or_go(job: Job, policy: ToolPolicy, agent: str, token: WorkerToken) -> Answer | Go:
    if job.status == JobStatus.PENDING and policy.effect == "irreversible" and policy.approval == "first_call":
        attempt = latest_attempt(job)
        if attempt.number == 1 and attempt.execution_state == Execution.NOT_STARTED:
            return _hold_for_approval(job.job_id, policy, agent, token)
    if job.status == JobStatus.PENDING:
        try:
            lease = claim_and_begin(job_id=job.job_id, worker=agent)
        except GateClosed as exc:
            return Answer.saying(f"not called: {exc}; call again later", job=job)
        except ClaimRefused as exc:
            job.refresh_from_db()
            return Answer.saying(f"not called: {exc}", job=job)
        return Go(job.job_id, lease, job.idempotency_key)
    return answer_from_ledger(job)


def answer_from_ledger(job: Job) -> Answer:
    """What the ledger says of a key whose call is not to run now."""
    replay = {REPLAY_META: True, "reckon/job": job.job_id}
    if job.status == JobStatus.SUCCEEDED:
        result = recorded_result(job)
        if result is None:
            return Answer([{"type": "text", "text": f"done (confirmed, no result recorded); job {job.job_id}"}],
                          meta=replay)
        return Answer.recorded(result, **replay)
    if job.status == JobStatus.FAILED:
        result = recorded_result(job)
        if result is not None:
            return Answer.recorded(result, **replay)
        return Answer.saying(f"failed: {latest_attempt(job).error}; job {job.job_id}; not repeated", job=job, **replay)
    if job.status == JobStatus.NEEDS_RECONCILIATION:
        return Answer.saying(f"outcome unknown, not repeated; job {job.job_id}; the reconciler or an operator "
                             f"will settle it: {console_link(job)}", job=job)
    if job.status == JobStatus.AWAITING_APPROVAL:
        return Answer.saying(f"awaiting approval: a person must approve this call before it runs; job {job.job_id}: "
                             f"{console_link(job)}; call again with the same arguments once approved", job=job)
    if job.status == JobStatus.RUNNING:
        return Answer.saying(f"in progress in another call, not repeated; job {job.job_id}", job=job)
    if job.status == JobStatus.CANCELLED:
        return Answer.saying(f"cancelled by a person, not run; job {job.job_id}: {console_link(job)}", job=job)
    return Answer.saying(f"held for an operator ({job.status}), not repeated; job {job.job_id}: {console_link(job)}",
                         job=job)


def recorded_result(job: Job) -> dict | None:
    """The upstream's result recorded for the job: by the call itself, or found by the reconciler."""
    event = LedgerEvent.objects.filter(job=job, evidence__has_key=RESULT).order_by("-id").first()
    return event.evidence[RESULT] if event is not None else None


def _hold_for_approval(job_id: str, policy: ToolPolicy, agent: str, token: WorkerToken) -> Answer:
    """An irreversible tool's first call: its attempt is closed unrun and a person is asked."""
    job = lock_job(job_id=job_id)
    attempt = latest_attempt(job)
    note = f"irreversible tool {policy.name}: approval is asked before its first call"
    with Batch() as batch:
        batch.transition(job, attempt, actor_type=ActorType.WORKER, actor=agent, kind=EventKind.APPROVAL_REQUESTED,
                         execution_state=Execution.FAILED, note=f"not run: {note}")
        # Four eyes: whoever made the agent's token may not approve what the agent asks for.
        open_approval_request(batch, job, attempt, requested_by=token.created_by, actor=agent,
                              actor_type=ActorType.WORKER, reason=note,
                              evidence={"tool": policy.name, "arguments": job.payload.get("arguments")})
    return answer_from_ledger(job)


def close_call(go: Go, result: dict) -> Answer:
    """The upstream answered: a result is a success, a tool error a definitive failure (retried
    on the next identical call while attempts remain)."""
    try:
        if result.get("isError"):
            text = " ".join(part.get("text", "") for part in result.get("content", []) if part.get("type") == "text")
            record_failure(lease=go.lease, error=(text or "the tool reported an error")[:1000], retryable=True,
                           evidence={RESULT: result})
        else:
            record_success(lease=go.lease, result_ref=_summary(result), evidence={RESULT: result})
    except StaleLease:
        # The lease ran out and the sweeper made the attempt unknown: the reconciler will settle it.
        return Answer.recorded(result, **{"reckon/job": go.job_id, "reckon/late": True})
    return Answer.recorded(result, **{"reckon/job": go.job_id})


def lose_call(go: Go, reason: str) -> Answer:
    try:
        record_unknown(lease=go.lease, reason=reason, evidence={"reason": reason})
    except (StaleLease, LedgerError):
        pass  # already settled elsewhere (the sweeper); what the ledger says is the answer
    return answer_from_ledger(Job.objects.get(job_id=go.job_id))


def _summary(result: dict) -> str:
    for part in result.get("content", []):
        if part.get("type") == "text":
            return part.get("text", "")[:500]
    return ""
