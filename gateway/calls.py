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
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from api.models import WorkerToken
from approvals.services import open_approval_request
from gateway.config import META_KEY, META_KEYS, ToolPolicy, get_upstream
from gateway.reconcile import FOUND, LOOKUP, RESULT
from ledger.models import Job, JobTombstone, LedgerEvent
from ledger.services import (
    Batch,
    ClaimRefused,
    GateClosed,
    InvalidJob,
    JobArchived,
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
    renew_lease,
    sweep_expired_lease,
)
from ledger.states import ActorType, EventKind, Execution, JobStatus

REDACTED = "[redacted]"
REPLAY_META = "reckon/replay"  # the answer is the upstream's result recorded for an earlier call
RECONCILED_META = "reckon/reconciled"  # the call's effect was found by a reconciler or a person


@dataclass(frozen=True)
class Answer:
    """What the agent gets: the upstream's result (recorded or fresh), or Reckon's word."""

    content: list[dict]
    is_error: bool = False
    structured: dict | None = None
    meta: dict = field(default_factory=dict)

    @classmethod
    def saying(cls, text: str, *, job: Job | None = None, retry: str | None = None, retry_after_s: int | None = None,
               **meta) -> Answer:
        extra = {"reckon/job": job.job_id, "reckon/status": job.status, "reckon/console": console_link(job)} \
            if job is not None else {}
        if retry is not None:
            extra["reckon/retry"] = retry
        if retry_after_s is not None:
            extra["reckon/retry_after_s"] = retry_after_s
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
    secrets: tuple = ()  # the call's redacted values: scrubbed from whatever is written of it
    caller: dict = field(default_factory=dict)  # the MCP client and protocol version: on the attempt's closing event


def console_link(job: Job) -> str:
    return settings.RECKON_CONSOLE_URL.rstrip("/") + reverse("job_detail", args=[job.job_id])


def canonical(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def redacted(policy: ToolPolicy, arguments: dict) -> dict:
    return {name: (REDACTED if name in policy.redact else value) for name, value in arguments.items()}


def arguments_digest(arguments: dict, secret_key: str | None = None) -> str:
    """Tells two calls' full arguments apart without storing them: keyed, so that a redacted
    secret cannot be guessed back from the digest."""
    key = settings.SECRET_KEY if secret_key is None else secret_key
    return hmac.new(key.encode(), canonical(arguments).encode(), hashlib.sha256).hexdigest()


class Refused(Exception):
    """The call is refused before the ledger is touched; the message says why (and `job` which job
    refused it, when there is one)."""

    def __init__(self, message: str, *, job: Job | None = None):
        super().__init__(message)
        self.job = job


def key_material(policy: ToolPolicy, tenant: str, arguments: dict, meta: dict) -> tuple[dict, str]:
    """What the call's idempotency key is made of, and how to say so."""
    if policy.key == "arguments":
        return {"tenant": tenant, "tool": policy.name, "arguments": arguments}, "arguments"
    if policy.key == "meta":
        given = client_key(policy, meta)
        # (Named by Reckon's own spelling whichever the client used: the same key sent once as
        # idempotencyKey and once as reckon/idempotency_key is one call.)
        return {"tenant": tenant, "tool": policy.name, "key": given}, f"_meta {META_KEY}"
    name = policy.key.removeprefix("argument:")
    if not isinstance(arguments.get(name), (str, int)) or isinstance(arguments.get(name), bool):
        raise Refused(f"tool {policy.listed_name} takes its idempotency key from the argument {name!r}, "
                      "which this call lacks (or is not a string or an integer)")
    return {"tenant": tenant, "tool": policy.name, "key": arguments[name]}, f"argument {name}"


def client_key(policy: ToolPolicy, meta: dict) -> str:
    """The key a client passed in the call's _meta, under any spelling of META_KEYS; two different
    keys at once are refused (which one would the client mean?)."""
    given = {spelling: meta[spelling] for spelling in META_KEYS if spelling in meta}
    if len(set(map(canonical, given.values()))) > 1:
        raise Refused(f"refused, nothing called: the call's _meta gives two different idempotency keys "
                      f"({', '.join(f'{spelling} = {canonical(value)}' for spelling, value in given.items())}); "
                      "give one key, under one of these names")
    value = next(iter(given.values()), None)
    if not isinstance(value, str) or not value.strip() or len(value) > 200:
        raise Refused(f"tool {policy.listed_name} takes its idempotency key from the call's _meta: "
                      f'pass _meta {{"{META_KEY}": "<key>"}} (or "idempotencyKey", '
                      '"io.modelcontextprotocol/idempotency-key"): a string of at most 200 characters')
    return value


def keyed_job_id(material: dict, secret_key: str) -> str:
    """A call's job id: an HMAC of what its key is made of (the tenant among it), under a key derived
    from the secret key, so that neither a redacted argument nor another tenant's future call can be
    worked out from it."""
    derived = hmac.new(secret_key.encode(), b"reckon: MCP gateway job ids", hashlib.sha256).digest()
    return "mcp-" + hmac.new(derived, canonical(material).encode(), hashlib.sha256).hexdigest()[:40]


def unkeyed_job_id(material: dict) -> str:
    """The job id gateways gave calls before ids were keyed (kept for the keys made then)."""
    return f"mcp:{material['tool']}:{hashlib.sha256(canonical(material).encode()).hexdigest()[:40]}"


def job_id_for(policy: ToolPolicy, tenant: str, arguments: dict, meta: dict) -> tuple[str, str, str]:
    """The call's job id, what its key was made of, and its arguments' digest. A key the ledger
    already holds under an earlier id (an unkeyed one, or one keyed under a secret key since
    rotated, listed in RECKON_SECRET_KEY_FALLBACKS) keeps its id, live or archived, and its digest
    is made under the key its job's was: an upgrade or a key rotation repeats no effect."""
    material, made_of = key_material(policy, tenant, arguments, meta)
    current = keyed_job_id(material, settings.SECRET_KEY)
    earlier = [keyed_job_id(material, key) for key in settings.SECRET_KEY_FALLBACKS]
    if unkeyed_ids_may_exist():
        earlier.append(unkeyed_job_id(material))
    if earlier:
        held = dict(Job.objects.filter(job_id__in=[current, *earlier]).values_list("job_id", "payload"))
        held |= {job_id: {} for job_id in
                 JobTombstone.objects.filter(job_id__in=earlier).values_list("job_id", flat=True)}
        if held and current not in held:
            job_id = next(job_id for job_id in earlier if job_id in held)
            digests = [arguments_digest(arguments, key) for key in (settings.SECRET_KEY, *settings.SECRET_KEY_FALLBACKS)]
            recorded = held[job_id].get("arguments_digest")
            return job_id, made_of, recorded if recorded in digests else digests[0]
    return current, made_of, arguments_digest(arguments)


UNKEYED_ID = r"^mcp:[A-Za-z0-9_-]+\.[^:]+:[0-9a-f]{40}$"
_unkeyed_ids: list[bool] = []  # asked once per process


def unkeyed_ids_may_exist() -> bool:
    """Whether the ledger holds (or archived) calls made by a gateway from before keyed ids: asked
    once per process, since no gateway of this version makes one (upgrade every gateway at once)."""
    if not _unkeyed_ids:
        _unkeyed_ids.append(Job.objects.filter(job_id__regex=UNKEYED_ID).exists()
                            or JobTombstone.objects.filter(job_id__regex=UNKEYED_ID).exists())
    return _unkeyed_ids[0]


def secrets_of(policy: ToolPolicy, arguments: dict) -> tuple:
    """The call's redacted values, each as every piece of text it may show up as."""
    pieces: set[str] = set()

    def collect(value) -> None:
        if isinstance(value, dict):
            for item in value.values():
                collect(item)
        elif isinstance(value, list):
            for item in value:
                collect(item)
        elif value is not None and not isinstance(value, bool):
            text = str(value)
            pieces.update(piece for piece in (text, json.dumps(text)[1:-1]) if piece)

    for name in policy.redact:
        if name in arguments:
            collect(arguments[name])
            if isinstance(arguments[name], (dict, list)):
                pieces.add(canonical(arguments[name]))
    return tuple(sorted(pieces, key=len, reverse=True))


# A piece of a redacted value this long is scrubbed too: error texts shorten what they echo
# (pydantic's validation errors show a long value's start and end around "...").
PIECE = 6


def scrubbed(value, secrets: tuple):
    """`value` (a result, an error, a reason) with every redacted value of the call, and every
    piece of one at least PIECE characters long, replaced."""
    if not secrets:
        return value
    if isinstance(value, str):
        return _scrubbed_text(value, secrets)
    if isinstance(value, dict):
        return {scrubbed(key, secrets): scrubbed(item, secrets) for key, item in value.items()}
    if isinstance(value, list):
        return [scrubbed(item, secrets) for item in value]
    if isinstance(value, (int, float)) and not isinstance(value, bool) and str(value) in secrets:
        return REDACTED
    return value


CALLER = "mcp"  # evidence: the client (clientInfo) and protocol version of the call that ran the attempt


def open_call(*, token: WorkerToken, policy: ToolPolicy, arguments: dict, meta: dict, agent: str,
              caller: dict | None = None) -> Answer | Go:
    upstream = get_upstream(policy.upstream)
    tenant = upstream.tenant
    if not token.allows(tenant=tenant, action=policy.action):
        raise Refused(f"token {token.name!r} may not call {policy.listed_name} (tenant {tenant}, action {policy.action})")
    job_id, made_of, digest = job_id_for(policy, tenant, arguments, meta)
    payload = {"upstream": policy.upstream, "tool": policy.tool, "arguments": redacted(policy, arguments),
               "arguments_digest": digest, "key_made_of": made_of}
    if policy.effect != "irreversible":  # (an irreversible tool may have to ask a person first)
        # A new key, in the ordinary case: enqueued, claimed and begun in one round trip and one
        # durable commit. A key seen before (None) takes the general path below.
        try:
            lease = enqueue_claim_and_begin(job_id=job_id, tenant=tenant, action=policy.action, payload=payload,
                                            worker=agent)
        except JobArchived as exc:
            raise Refused(archived(policy, exc)) from None
        except InvalidJob as exc:
            raise Refused(str(exc)) from None
        if lease is not None:
            return Go(job_id, lease, lease.job.idempotency_key, secrets_of(policy, arguments), dict(caller or {}))
    with transaction.atomic():
        try:
            job = enqueue_job(job_id=job_id, tenant=tenant, action=policy.action, payload=payload,
                              actor=agent, actor_type=ActorType.WORKER, dispatch=False)
        except JobArchived as exc:
            raise Refused(archived(policy, exc)) from None
        except JobConflict:
            raise Refused(f"the idempotency key of this call ({made_of}) was used before with other arguments: "
                          f"refused, nothing called; job {job_id}", job=Job.objects.filter(job_id=job_id).first()) from None
        except InvalidJob as exc:
            raise Refused(str(exc)) from None
        return _answer_or_go(job, policy, agent, token, secrets_of(policy, arguments), dict(caller or {}))


def archived(policy: ToolPolicy, refusal: JobArchived) -> str:
    """A key whose call was made long enough ago that only its tombstone is left."""
    return f"archived: this call of {policy.listed_name} was made before: {refusal}; not repeated, nothing called"


def _answer_or_go(job: Job, policy: ToolPolicy, agent: str, token: WorkerToken, secrets: tuple,
                  caller: dict) -> Answer | Go:
    if job.status == JobStatus.RUNNING and sweep_expired_lease(job_id=job.job_id):
        job.refresh_from_db()  # its call's gateway stopped renewing the lease: swept now, not "in progress"
    if job.status == JobStatus.PENDING and policy.effect == "irreversible" and policy.approval == "first_call":
        attempt = latest_attempt(job)
        if attempt.number == 1 and attempt.execution_state == Execution.NOT_STARTED:
            return _hold_for_approval(job.job_id, policy, agent, token, caller)
    if job.status == JobStatus.PENDING:
        try:
            lease = claim_and_begin(job_id=job.job_id, worker=agent)
        except GateClosed as exc:
            return Answer.saying(f"not called: {exc}; call again with the same arguments in about {GATE_RETRY_S} s",
                                 job=job, retry=RETRY_LATER, retry_after_s=GATE_RETRY_S)
        except ClaimRefused as exc:
            job.refresh_from_db()
            return Answer.saying(f"not called: {exc}", job=job)
        return Go(job.job_id, lease, job.idempotency_key, secrets, caller)
    return answer_from_ledger(job)


# What an agent is told to do next, in every answer that is Reckon's word (`_meta["reckon/retry"]`):
# a framework's retry loop, or a model, must not read "held" as "try again now".
RETRY_NEVER = "never"  # not run and never will be: do not call again
RETRY_AFTER = "after"  # call again with the same arguments after reckon/retry_after_s: the outcome, never a second run
RETRY_AFTER_APPROVAL = "after_approval"  # a person must approve first; then call again with the same arguments
RETRY_AFTER_SETTLED = "after_settled"  # a person settles it; a call after that returns the outcome
RETRY_LATER = "later"  # not called now (the gate is closed): the same call may run later
GATE_RETRY_S = 30  # how soon to ask again while the dead-man gate holds irreversible effects


def _seconds_until(moment, floor: int = 1) -> int:
    return max(floor, int((moment - timezone.now()).total_seconds() + 0.999)) if moment else floor


def answer_from_ledger(job: Job) -> Answer:
    """What the ledger says of a key whose call is not to run now: the state, in a sentence that says
    whether and when to call again, and the same in `_meta` (reckon/status, reckon/job, reckon/retry,
    reckon/retry_after_s) for a client that reads it."""
    replay = {REPLAY_META: True, "reckon/job": job.job_id}
    if job.status == JobStatus.SUCCEEDED:
        result = recorded_result(job)
        if result is None:
            return reconciled(job)
        return Answer.recorded(result, **replay)
    if job.status == JobStatus.FAILED:
        result = recorded_result(job)
        if result is not None:
            return Answer.recorded(result, **replay)
        return Answer.saying(f"failed: {latest_attempt(job).error}; job {job.job_id}; not repeated: do not call "
                             "again with these arguments", job=job, retry=RETRY_NEVER, **replay)
    if job.status == JobStatus.NEEDS_RECONCILIATION:
        wait = _seconds_until(job.next_check_at)
        return Answer.saying(f"outcome unknown, not repeated: do not call this tool again for it now. Reckon's "
                             f"reconciler (or an operator) will find out whether it happened; job {job.job_id}: "
                             f"{console_link(job)}. Calling again with the same arguments, after about {wait} s, "
                             "returns what was found and never runs it twice", job=job, retry=RETRY_AFTER,
                             retry_after_s=wait)
    if job.status == JobStatus.AWAITING_APPROVAL:
        return Answer.saying(f"awaiting approval: a person must approve this call before it runs; do not call "
                             f"again until they have; job {job.job_id}: {console_link(job)}. Once approved, call "
                             "again with the same arguments: it runs once", job=job, retry=RETRY_AFTER_APPROVAL)
    if job.status == JobStatus.RUNNING:
        wait = int(settings.RECKON_MCP_GATEWAY_LEASE_S + 0.999)
        return Answer.saying(f"in progress in another call, not repeated; job {job.job_id}. Calling again with the "
                             f"same arguments after about {wait} s returns its outcome", job=job, retry=RETRY_AFTER,
                             retry_after_s=wait)
    if job.status == JobStatus.CANCELLED:
        return Answer.saying(f"cancelled by a person, not run: do not call again with these arguments; job "
                             f"{job.job_id}: {console_link(job)}", job=job, retry=RETRY_NEVER)
    return Answer.saying(f"held for an operator ({job.status}), not repeated: do not call again now; a person will "
                         f"settle it; job {job.job_id}: {console_link(job)}. A call with the same arguments after "
                         "that returns the outcome", job=job, retry=RETRY_AFTER_SETTLED)


def recorded_result(job: Job) -> dict | None:
    """The upstream's own result for the job: recorded by the call itself, or given by a reconciler
    that had it (gateway.reconcile.effect_found). Not a look-up's answer: that is not the tool's."""
    # (Gateways before look-up rules recorded a look-up's answer as the result, without FOUND.)
    event = (LedgerEvent.objects.filter(job=job, evidence__has_key=RESULT)
             .exclude(Q(evidence__has_key=LOOKUP) & ~Q(evidence__has_key=FOUND)).order_by("-id").first())
    return event.evidence[RESULT] if event is not None else None


def reconciled(job: Job) -> Answer:
    """A call whose effect was confirmed without the tool's result: the agent is told so, with what
    was found and how, not a result posing as the tool's."""
    meta = {RECONCILED_META: True, "reckon/job": job.job_id, "reckon/console": console_link(job)}
    event = LedgerEvent.objects.filter(job=job, evidence__has_key=LOOKUP).order_by("-id").first()
    if event is not None:
        found = event.evidence.get(FOUND, event.evidence.get(RESULT))
        asked = event.evidence[LOOKUP]
        meta |= {"reckon/found": found, "reckon/lookup": asked}
        text = (f"done: the call's effect was found by the look-up {asked.get('tool')} "
                f"({canonical(asked.get('arguments', {}))}): {canonical(found)}; the tool's own result was not "
                f"recorded, and the tool was not called again; job {job.job_id}")
    else:
        event = LedgerEvent.objects.filter(job=job, evidence__has_key=FOUND).order_by("-id").first()
        found = event.evidence[FOUND] if event is not None else None
        if found is not None:
            meta["reckon/found"] = found
        who = "a reconciler" if event is not None else "a person or a reconciler"
        text = (f"done: the call's effect was confirmed by {who}{f': {canonical(found)}' if found is not None else ''}"
                f"; the tool's own result was not recorded, and the tool was not called again; job {job.job_id}")
    return Answer([{"type": "text", "text": text}], meta=meta)


def _hold_for_approval(job_id: str, policy: ToolPolicy, agent: str, token: WorkerToken, caller: dict) -> Answer:
    """An irreversible tool's first call: its attempt is closed unrun and a person is asked."""
    job = lock_job(job_id=job_id)
    attempt = latest_attempt(job)
    note = f"irreversible tool {policy.name}: approval is asked before its first call"
    with Batch() as batch:
        batch.transition(job, attempt, actor_type=ActorType.WORKER, actor=agent, kind=EventKind.APPROVAL_REQUESTED,
                         execution_state=Execution.FAILED, note=f"not run: {note}",
                         evidence={CALLER: caller} if caller else None)
        # Four eyes: whoever made the agent's token may not approve what the agent asks for.
        open_approval_request(batch, job, attempt, requested_by=token.created_by, actor=agent,
                              actor_type=ActorType.WORKER, reason=note,
                              evidence={"tool": policy.name, "arguments": job.payload.get("arguments")})
    return answer_from_ledger(job)


def close_call(go: Go, result: dict) -> Answer:
    """The upstream answered: a result is a success, a tool error a definitive failure (retried
    on the next identical call while attempts remain)."""
    result = scrubbed(result, go.secrets)
    try:
        if result.get("isError"):
            text = " ".join(part.get("text", "") for part in result.get("content", []) if part.get("type") == "text")
            record_failure(lease=go.lease, error=(text or "the tool reported an error")[:1000], retryable=True,
                           evidence={RESULT: result, **_caller(go)})
        else:
            record_success(lease=go.lease, result_ref=_summary(result), evidence={RESULT: result, **_caller(go)})
    except StaleLease:
        # The lease ran out and the sweeper made the attempt unknown: the reconciler will settle it.
        return Answer.recorded(result, **{"reckon/job": go.job_id, "reckon/late": True})
    return Answer.recorded(result, **{"reckon/job": go.job_id})


def _caller(go: Go) -> dict:
    return {CALLER: go.caller} if go.caller else {}


def renew_call(go: Go) -> bool:
    """Extend the call's lease while the upstream runs it. False: the lease is no longer this call's
    (it ran out, and the call is unknown or about to be: the sweeper's, or another call's, to say)."""
    try:
        renew_lease(lease=go.lease)
    except StaleLease:
        return False
    return True


def lose_call(go: Go, reason: str) -> Answer:
    reason = scrubbed(reason, go.secrets)
    try:
        record_unknown(lease=go.lease, reason=reason, evidence={"reason": reason, **_caller(go)})
    except (StaleLease, LedgerError):
        pass  # already settled elsewhere (the sweeper); what the ledger says is the answer
    return answer_from_ledger(Job.objects.get(job_id=go.job_id))


def _scrubbed_text(text: str, secrets: tuple) -> str:
    hidden = bytearray(len(text))
    for secret in secrets:
        if len(secret) < PIECE:
            start = text.find(secret)
            while start != -1:
                hidden[start:start + len(secret)] = b"\1" * len(secret)
                start = text.find(secret, start + 1)
            continue
        pieces = {secret[i:i + PIECE] for i in range(len(secret) - PIECE + 1)}
        for i in range(len(text) - PIECE + 1):
            if text[i:i + PIECE] in pieces:
                hidden[i:i + PIECE] = b"\1" * PIECE
    if not any(hidden):
        return text
    kept, i = [], 0
    while i < len(text):
        j = i
        while j < len(text) and hidden[j] == hidden[i]:
            j += 1
        kept.append(REDACTED if hidden[i] else text[i:j])
        i = j
    return "".join(kept)


def _summary(result: dict) -> str:
    for part in result.get("content", []):
        if part.get("type") == "text":
            return part.get("text", "")[:500]
    return ""
