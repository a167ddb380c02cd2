"""The worker API (/api/v1/): parse, check scope, call one ledger service, serialise.

Built on django-ninja: the pydantic schemas in `api.schemas` validate each request and are the
OpenAPI document (/api/v1/openapi.json). Every transition is `ledger.services`; a lease-bound
write rebuilds the Lease from the attempt the caller's fencing token names, and the service's
compare-and-set decides. A job outside the token's tenants and actions is, to that token, no job; and so is a job of the
MCP gateway (an `mcp:` action) to a token that does not name its action (WorkerToken.reaches).
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from ninja import NinjaAPI
from ninja.errors import HttpError, ValidationError
from ninja.parser import Parser
from ninja.responses import Status

from api import enqueue_keys
from api.body import parse_json_object
from api.claims import NOTHING_HEADERS, claim_next, claim_scope, client_gone_from
from api.http import (
    ApiError,
    WorkerTokenAuth,
    check_reach,
    error_response,
    field_message,
    http_error,
    invalid_fields,
    no_such_job,
    refusal,
    server_error,
)
from api.models import ALL, WorkerToken
from api.schemas import (
    BeginRequest,
    ClaimNextRequest,
    ClaimRequest,
    EnqueueRequest,
    Error,
    Event,
    FailureRequest,
    IdentityRequest,
    Job,
    JobIdInPath,
    JobRecord,
    Lease,
    LeaseRequest,
    Leases,
    Result,
    SuccessRequest,
    UnknownRequest,
)
from api.tokens import holder_name, holds
from ledger import models, services
from ledger.actions import UnknownAction, get_action
from ledger.scope import Scope
from ledger.states import JOB_STATUS_FOR_LATEST, ActorType
from reconciliation import decisions
from reconciliation.registry import REGISTRY


class JsonObjectParser(Parser):
    def parse_body(self, request: HttpRequest) -> dict:
        return parse_json_object(request)


class WorkerApi(NinjaAPI):
    def get_openapi_schema(self, *, path_prefix=None, path_params=None):
        """Paths relative to the server `/api/v1`; built once."""
        if getattr(self, "_document", None) is None:
            self._document = super().get_openapi_schema(path_prefix="", path_params=path_params)
        return self._document

    def validation_error_from_error_contexts(self, error_contexts):
        """Each error with its message, written while pydantic's error still has the input."""
        error = super().validation_error_from_error_contexts(error_contexts)
        originals = [
            (original, context.model)
            for context in error_contexts
            for original in context.pydantic_validation_error.errors(include_url=False)
        ]
        for detail, (original, model) in zip(error.errors, originals, strict=True):
            detail["message"] = field_message(original, allowed=_body_fields(model))
        return error


def _body_fields(model) -> list[str]:
    """The fields a request body may have (ninja wraps the body schema in a model of its own)."""
    for field in model.model_fields.values():
        if hasattr(field.annotation, "model_fields"):
            return list(field.annotation.model_fields)
    return []


api = WorkerApi(
    title="Reckon worker API",
    version="1",
    description=(
        "Enqueue jobs and run Reckon's safe worker loop from any language: claim (a job by id, "
        "or the next one in your scope: POST /claims, which can wait for work) -> (verify "
        "identity) -> begin side effect -> call the provider with the job's idempotency key -> "
        "record success, failure or unknown. Every write after the claim carries the lease's "
        "owner and fencing token; a stale one changes nothing (409 stale_lease).\n\n"
        "Bodies are JSON objects (`Content-Type: application/json`, UTF-8; anything else is 415), "
        "at most RECKON_API_MAX_BODY_BYTES (256 KiB by default; 413 beyond), with no repeated "
        "key in any object, no NaN or Infinity and no unpaired surrogate escapes (400). A job "
        "outside the token's tenants and actions answers 404 exactly like a job that does not "
        "exist. The MCP gateway's tool calls (`mcp:` actions) are the gateway's: a `*` in a token's "
        "actions does not reach them (only naming the action does), and no evidence may hold "
        "`mcp_result`, where the gateway records a tool's result (400). "
        'Every refusal is `{"error": {"code", "message", "fields"?, "reason"?}}`.'
    ),
    servers=[{"url": "/api/v1"}],
    openapi_url="/openapi.json",
    docs_url=None,
    docs_decorator=require_GET,
    urls_namespace="api",
    auth=WorkerTokenAuth(),
    parser=JsonObjectParser(),
)
for refused in (ApiError, services.LedgerError, UnknownAction):
    api.add_exception_handler(refused, refusal)
api.add_exception_handler(HttpError, http_error)
api.add_exception_handler(ValidationError, invalid_fields)
api.add_exception_handler(Exception, server_error)


# -- the OpenAPI answers --------------------------------------------------------------------------

ERRORS = {
    400: "invalid body or fields (`fields` names each one)",
    401: "no token, an unknown token or a revoked token",
    403: "the token's scope does not cover this tenant and action (a `*` does not cover the MCP gateway's "
         "`mcp:` actions)",
    404: "no such job (a job outside the token's scope is no job to it, as is an MCP gateway job to a `*`)",
    413: "body over the size limit",
    415: "the body is not application/json",
}
STALE = "stale_lease: the lease is no longer current (nothing changed; the rejection is recorded)"


def answers(
    ok: dict, *errors: int, conflict: str = "", links: dict | None = None, error_texts: dict | None = None,
    headers: dict | None = None,
) -> dict:
    """`response` and `openapi_extra` for an operation: its schemas, and what each answer means."""
    codes = [*errors, 409] if conflict else list(errors)
    descriptions = {**{status: {"description": text} for status, (_, text) in ok.items()}}
    descriptions.update({code: {"description": (error_texts or {}).get(code) or ERRORS[code]} for code in errors})
    if conflict:
        descriptions[409] = {"description": conflict}
    for status, operation_links in (links or {}).items():
        descriptions[status]["links"] = operation_links
    for status, operation_headers in (headers or {}).items():
        descriptions[status]["headers"] = operation_headers
    return {
        "response": {**{status: schema for status, (schema, _) in ok.items()}, frozenset(codes): Error},
        "openapi_extra": {"responses": descriptions},
    }


def _link(operation_id: str, lease_at: str | None = None) -> dict:
    """A link to an operation on the same job; `lease_at` says where the answer holds the lease."""
    link = {"operationId": operation_id, "parameters": {"job_id": "$response.body#/job_id"}}
    if lease_at is not None:
        owner = "owner" if lease_at == "" else "lease_owner"  # a lease's, or "/attempt": the attempt's
        link["requestBody"] = {
            "owner": f"$response.body#{lease_at}/{owner}",
            "fencing_token": f"$response.body#{lease_at}/fencing_token",
        }
    return link


RESULTS = ("recordSuccess", "recordFailure", "recordUnknown")
JOB_LINKS = {"read": _link("getJob"), "claim": _link("claimJob"), "history": _link("getJobEvents")}
LEASE_LINKS = {
    name: _link(name, lease_at="") for name in ("renewLease", "verifyIdentity", "beginSideEffect", *RESULTS)
}
BEGUN_LINKS = {name: _link(name, lease_at="/attempt") for name in RESULTS}
VERIFIED_LINKS = {"begin": _link("beginSideEffect", lease_at="/attempt")}
LEASE_ERRORS = (400, 401, 404, 413, 415)


# -- serialisation --------------------------------------------------------------------------------


def attempt_json(attempt: models.Attempt, viewer: WorkerToken) -> dict:
    """The attempt as `viewer` may see it: a lease shows its owner and fencing token only to the
    token that claimed it."""
    yours = holds(viewer, attempt.lease_owner)
    return {
        "number": attempt.number,
        "delivery": attempt.delivery_state,
        "execution": attempt.execution_state,
        "side_effect": attempt.side_effect_state,
        "lease_owner": attempt.lease_owner if yours else "",
        "fencing_token": attempt.lease_token if yours else None,
        "lease_expires_at": attempt.lease_expires_at,
        "heartbeat_at": attempt.heartbeat_at,
        "observed_identity": attempt.observed_identity,
        "sent_to": attempt.sent_to,
        "result_ref": attempt.result_ref,
        "error": attempt.error,
        "version": attempt.version,
        "created_at": attempt.created_at,
        "updated_at": attempt.updated_at,
    }


def job_json(job: models.Job, viewer: WorkerToken, *, attempts: bool = True) -> dict:
    body = {
        "job_id": job.job_id,
        "tenant": job.tenant,
        "action": job.action,
        "payload": job.payload,
        "identity": job.identity,
        "idempotency_key": job.idempotency_key,
        "status": job.status,
        "created_at": job.created_at,
        "updated_at": job.updated_at,
    }
    if attempts:
        body["attempts"] = [attempt_json(a, viewer) for a in job.attempts.order_by("number")]
    return body


def lease_json(lease: services.Lease, job: models.Job, viewer: WorkerToken) -> dict:
    return {
        "job_id": lease.job_id,
        "attempt": lease.attempt_number,
        "owner": lease.owner,
        "fencing_token": lease.token,
        "expires_at": lease.expires_at,
        "ttl_seconds": get_action(job.action).lease_ttl.total_seconds(),
        "job": job_json(job, viewer, attempts=False),
    }


def leases_json(leases: list[services.Lease], viewer: WorkerToken) -> dict:
    """The answer of a claim of up to N jobs (`max`): each lease as a claim of one answers it."""
    missing = [lease.job_id for lease in leases if lease.job is None]  # claimed by the Python path
    loaded = models.Job.objects.in_bulk(missing, field_name="job_id") if missing else {}
    return {"leases": [lease_json(lease, lease.job or loaded[lease.job_id], viewer) for lease in leases]}


def _result(job_id: str, attempt: models.Attempt, viewer: WorkerToken) -> dict:
    """The job's status after a step that returned `attempt`, its latest: where the ledger's rules
    allow one status only for a job whose latest attempt is in that state (running, succeeded:
    the worker loop's ordinary steps), that status, without reading the job again."""
    statuses = JOB_STATUS_FOR_LATEST[attempt.execution_state]
    if len(statuses) == 1:
        status = statuses[0].value
    else:
        status = models.Job.objects.filter(job_id=job_id).values_list("status", flat=True).get()
    return {"job_id": job_id, "status": status, "attempt": attempt_json(attempt, viewer)}


def answered(request: HttpRequest, status: int, body: dict) -> HttpResponse:
    """A step's answer, rendered as ninja renders any answer but not validated again against its
    schema: lease_json and _result build it from the ledger's typed rows, field for field as the
    schema (Lease, Result) declares it; tests/api/test_lean_path.py validates these answers with the
    schemas, so the two cannot drift. On the worker cycle's path, the second validation was about a
    tenth of a request's CPU."""
    return api.create_response(request, body, status=status)


# -- loading --------------------------------------------------------------------------------------


def _job_in_scope(request: HttpRequest, job_id: str) -> models.Job:
    job = models.Job.objects.filter(job_id=job_id).first()
    if job is None or not request.auth.reaches(tenant=job.tenant, action=job.action):
        raise no_such_job()
    return job


def _lease_in_scope(request: HttpRequest, job_id: str, body: LeaseRequest) -> services.Lease:
    """The Lease the caller claims to hold, on a job in the token's scope, read in one query;
    the service checks it against the attempt under the job's lock."""
    try:
        return services.lease_named(job_id=job_id, owner=holder_name(request.auth, body.owner),
                                    token=body.fencing_token, scope=_scope(request))
    except services.NotInScope:
        raise no_such_job() from None


def _named_lease(request: HttpRequest, job_id: str, body: LeaseRequest) -> services.Lease:
    """The caller's lease as it names it (job, owner, fencing token): the step finds the attempt."""
    return services.Lease(job_id=job_id, attempt_id=None, attempt_number=None,
                          owner=holder_name(request.auth, body.owner), token=body.fencing_token, expires_at=None)


def _scope(request: HttpRequest) -> Scope:
    """The token's tenants and actions, as the ledger's steps take them (None: all tenants). The
    actions are always named: a "*" is every declared action but the MCP gateway's, whose jobs are
    the gateway's (WorkerToken.reaches)."""
    token = request.auth
    return Scope(tenants=None if ALL in token.tenants else token.tenants, actions=token.actions_reached())


# -- endpoints ------------------------------------------------------------------------------------


ENQUEUE_ANSWERS = answers(
    {
        201: (Job, "created by this request"),
        200: (Job, "the same job was already enqueued (or this Idempotency-Key's request was): it is returned"),
    },
    400,
    401,
    403,
    413,
    415,
    422,
    conflict=(
        "job_conflict: this id names other work of yours (the message says which fields "
        "differ); job_archived: this id's job finished and its history was archived (the message "
        "says its final state, when and the archive file): it is never run again; "
        "job_id_unavailable: the id is taken by work outside your token's scope; "
        "idempotency_key_in_flight: a request with this Idempotency-Key is being enqueued now (ask again "
        "after Retry-After for its answer)"
    ),
    error_texts={422: "idempotency_key_reused: this Idempotency-Key was sent before with another request; "
                      "nothing was enqueued"},
    links={201: JOB_LINKS, 200: JOB_LINKS},
    headers={200: {"Idempotent-Replayed": {
        "description": "true: the answer is for the Idempotency-Key's first request", "schema": {"type": "string"}}},
             409: {"Retry-After": {"description": "idempotency_key_in_flight: seconds to wait before asking again",
                                   "schema": {"type": "integer"}}}},
)
ENQUEUE_ANSWERS["openapi_extra"]["parameters"] = [{
    "name": enqueue_keys.HEADER, "in": "header", "required": False, "schema": {
        "type": "string", "minLength": 1, "maxLength": enqueue_keys.MAX_LENGTH, "pattern": "^[!-~]+$"},
    "description": (
        "A key of the caller's for this request (Stripe's semantics, scoped to the token): the same key with "
        "the same request answers the same job; with another request, 422; while its first request is being "
        "enqueued, 409 with Retry-After. Without it the enqueue is idempotent on job_id alone."),
}]


@api.post(
    "/jobs",
    operation_id="enqueueJob",
    summary="Enqueue a job (idempotent on job_id, and on an Idempotency-Key)",
    **ENQUEUE_ANSWERS,
)
def enqueue(request: HttpRequest, body: EnqueueRequest, response: HttpResponse):
    token = request.auth
    check_reach(token, tenants=[body.tenant], actions=[body.action], doing="enqueue")
    key = request.headers.get(enqueue_keys.HEADER)
    if key is not None:
        try:
            key = enqueue_keys.checked_key(key)
        except ValueError as exc:
            raise ApiError(400, "invalid", "the Idempotency-Key header is invalid",
                           fields={enqueue_keys.HEADER: str(exc)}) from None
    conflict = holder = None
    replayed = False
    try:
        if key is None:
            job = services.enqueue_job(**body.model_dump(), actor=holder_name(token, "api"))
        else:
            job, replayed = enqueue_keys.enqueue_with_key(token=token, key=key, request=body.model_dump(),
                                                          actor=holder_name(token, "api"))
    except enqueue_keys.KeyInFlight as exc:
        answer = error_response(409, "idempotency_key_in_flight", str(exc))
        answer["Retry-After"] = str(enqueue_keys.IN_FLIGHT_RETRY_AFTER_S)
        return answer
    except enqueue_keys.KeyReused as exc:
        raise ApiError(422, "idempotency_key_reused", str(exc)) from None
    except services.JobArchived as refused:  # its history was archived: the tombstone says whose it was
        conflict, holder = refused, {"tenant": refused.tombstone.tenant, "action": refused.tombstone.action}
    except services.JobConflict as refused:
        conflict = refused
    if conflict is not None:
        holder = holder or models.Job.objects.filter(job_id=body.job_id).values("tenant", "action").get()
        if not token.reaches(**holder):  # say nothing of work this token cannot see
            raise ApiError(409, "job_id_unavailable", "this job id is taken; choose another")
        raise conflict
    if replayed:
        response["Idempotent-Replayed"] = "true"
    return Status(201 if job.created_now and not replayed else 200, job_json(job, token))


@api.get(
    "/jobs/{job_id}",
    operation_id="getJob",
    summary="A job and its attempts",
    **answers({200: (JobRecord, "the job, and the decisions a person may take on it now")}, 401, 404,
              links={200: {"claim": _link("claimJob")}}),
)
def job_detail(request: HttpRequest, job_id: JobIdInPath):
    job = _job_in_scope(request, job_id)
    return {**job_json(job, request.auth), "decisions": decisions_json(job)}


def decisions_json(job: models.Job) -> list[dict]:
    """The decisions a person may take on the job now, as the registry declares them (the console
    offers the same; taking one is the console's, with a person's login and role)."""
    if not job.attempts.exists():
        return []
    reversible = bool((job.policy or {}).get("reversible", False))
    return [
        {"name": name, "label": REGISTRY[name].label, "role": REGISTRY[name].role,
         "help": REGISTRY[name].help_for(reversible=reversible)}
        for name in decisions.allowed_decisions(job)
    ]


# Evidence that names a lease's owner or fencing token: shown only to the token that held it.
LEASE_EVIDENCE = frozenset({"fencing_token", "stale_token", "current_token", "released_token", "lease_owner"})


def event_json(event: models.LedgerEvent, number: int | None, viewer: WorkerToken) -> dict:
    """An event of the job's history as `viewer` may see it: another token's worker is named
    only as such, with no note and no fencing token (as the job's attempts hide its lease)."""
    others = event.actor_type == ActorType.WORKER and not holds(viewer, event.actor)
    evidence = event.evidence if isinstance(event.evidence, dict) else {}
    # A refusal names the lease it met (the current one, maybe another token's): never shown.
    if others or "current_token" in evidence or not holds(viewer, evidence.get("lease_owner") or event.actor):
        evidence = {key: value for key, value in evidence.items() if key not in LEASE_EVIDENCE}
    return {
        "id": event.pk,
        "at": event.at,
        "attempt": number,
        "actor_type": event.actor_type,
        "actor": "another token's worker" if others else event.actor,
        "kind": event.kind,
        "before": event.before,
        "after": event.after,
        "note": "" if others else event.note,
        "evidence": evidence,
        "hash": event.hash,
    }


@api.get(
    "/jobs/{job_id}/events",
    operation_id="getJobEvents",
    summary="A job's history: every event, oldest first (append-only and hash-chained)",
    **answers({200: (list[Event], "the job's events")}, 401, 404),
)
def job_events(request: HttpRequest, job_id: JobIdInPath):
    job = _job_in_scope(request, job_id)
    events = job.events.select_related(None).order_by("id")
    numbers = dict(job.attempts.values_list("pk", "number"))
    return [event_json(event, numbers.get(event.attempt_id), request.auth) for event in events]


@api.post(
    "/jobs/{job_id}/claim",
    operation_id="claimJob",
    summary="Lease the job's queued attempt, with the next fencing token",
    **answers(
        {201: (Lease, "leased")},
        *LEASE_ERRORS,
        conflict=(
            "claim_refused, with `reason`: duplicate_delivery, previous_attempt_unknown, "
            "attempt_blocked, attempts_exhausted, not_claimable"
        ),
        links={201: LEASE_LINKS},
    ),
)
def claim(request: HttpRequest, job_id: JobIdInPath, body: ClaimRequest):
    try:
        lease = services.claim_job(job_id=job_id, worker=holder_name(request.auth, body.worker), scope=_scope(request))
    except services.NotInScope:
        raise no_such_job() from None
    return answered(request, 201, lease_json(lease, lease.job or models.Job.objects.get(job_id=job_id), request.auth))


@api.post(
    "/claims",
    operation_id="claimNextJob",
    summary="Lease the oldest claimable job in your scope, waiting up to wait_seconds for one",
    **answers(
        {
            201: (Lease | Leases, "leased, with the next fencing token (exactly as a claim by id); with `max` "
                                  "above 1, {\"leases\": [...]}: up to `max` jobs, each leased so"),
            204: (None, "nothing claimable came within the wait; `Reckon-Reason` says why (no_work; "
                        "dead_man_gate: irreversible jobs in scope are held while the sweeper or the "
                        "reconciler is not running; cannot_wait: this server could not hold the wait) and "
                        "`Reckon-Detail` in a sentence; with Retry-After (seconds) when it knows when to ask "
                        "again"),
        },
        400,
        401,
        403,
        413,
        415,
        error_texts={403: "the request names a tenant or action outside the token's scope"},
        links={201: LEASE_LINKS},
        headers={204: NOTHING_HEADERS},
    ),
)
def claim_next_in_scope(request: HttpRequest, body: ClaimNextRequest):
    scope = claim_scope(request.auth, actions=body.actions, tenants=body.tenants)
    answer = claim_next(
        request.auth,
        worker=holder_name(request.auth, body.worker),
        scope=scope,
        wait_seconds=body.wait_seconds,
        # A single-threaded server (gunicorn's sync worker) would serve nothing else while waiting.
        can_wait=bool(request.META.get("wsgi.multithread")),
        client_gone=client_gone_from(request.META),
        limit=body.max,
    )
    if answer.lease is None:
        return answer.nothing()
    if body.max > 1:
        return answered(request, 201, leases_json(answer.leases, request.auth))
    return answered(request, 201, lease_json(answer.lease, models.Job.objects.get(job_id=answer.lease.job_id),
                                             request.auth))


@api.post(
    "/jobs/{job_id}/lease/renew",
    operation_id="renewLease",
    summary="Extend the lease while owner and token still match",
    **answers({200: (Lease, "renewed")}, *LEASE_ERRORS, conflict=STALE, links={200: LEASE_LINKS}),
)
def renew(request: HttpRequest, job_id: JobIdInPath, body: LeaseRequest):
    lease = services.renew_lease(lease=_lease_in_scope(request, job_id, body))
    return lease_json(lease, models.Job.objects.get(job_id=job_id), request.auth)


@api.post(
    "/jobs/{job_id}/lease/identity",
    operation_id="verifyIdentity",
    summary="Report the identity the worker really runs as; a mismatch blocks the attempt",
    **answers(
        {200: (Result, "verified")},
        *LEASE_ERRORS,
        conflict=STALE + "; identity_mismatch: the attempt is now blocked",
        links={200: VERIFIED_LINKS},
    ),
)
def identity(request: HttpRequest, job_id: JobIdInPath, body: IdentityRequest):
    lease = _lease_in_scope(request, job_id, body)
    return _result(job_id, services.verify_identity(lease=lease, observed=body.observed), request.auth)


@api.post(
    "/jobs/{job_id}/lease/begin",
    operation_id="beginSideEffect",
    summary="Mark the side effect submitted; only then call the provider",
    **answers(
        {200: (Result, "submitted")},
        *LEASE_ERRORS,
        conflict=STALE + "; invalid_transition: already begun, or identity not verified",
        links={200: BEGUN_LINKS},
    ),
)
def begin(request: HttpRequest, job_id: JobIdInPath, body: BeginRequest):
    try:
        begun = services.begin_side_effect(lease=_named_lease(request, job_id, body), sent_to=body.sent_to,
                                           scope=_scope(request))
    except services.NotInScope:
        raise no_such_job() from None
    return answered(request, 200, _result(job_id, begun, request.auth))


@api.post(
    "/jobs/{job_id}/lease/success",
    operation_id="recordSuccess",
    summary="The provider confirmed the effect",
    **answers(
        {200: (Result, "succeeded")},
        *LEASE_ERRORS,
        conflict=STALE + "; invalid_transition: nothing was begun",
    ),
)
def success(request: HttpRequest, job_id: JobIdInPath, body: SuccessRequest):
    try:
        attempt = services.record_success(lease=_named_lease(request, job_id, body), result_ref=body.result_ref,
                                          evidence=body.evidence, scope=_scope(request))
    except services.NotInScope:
        raise no_such_job() from None
    return answered(request, 200, _result(job_id, attempt, request.auth))


@api.post(
    "/jobs/{job_id}/lease/failure",
    operation_id="recordFailure",
    summary="A definitive refusal: the provider proved nothing happened",
    **answers({200: (Result, "failed")}, *LEASE_ERRORS, conflict=STALE),
)
def failure(request: HttpRequest, job_id: JobIdInPath, body: FailureRequest):
    attempt = services.record_failure(
        lease=_lease_in_scope(request, job_id, body), error=body.error, retryable=body.retryable,
        evidence=body.evidence,
    )
    return _result(job_id, attempt, request.auth)


@api.post(
    "/jobs/{job_id}/lease/unknown",
    operation_id="recordUnknown",
    summary="The worker lost the ability to observe whether the effect happened",
    **answers(
        {200: (Result, "unknown: the job goes to reconciliation")},
        *LEASE_ERRORS,
        conflict=STALE + "; invalid_transition: nothing was begun",
    ),
)
def unknown(request: HttpRequest, job_id: JobIdInPath, body: UnknownRequest):
    attempt = services.record_unknown(
        lease=_lease_in_scope(request, job_id, body), reason=body.reason, evidence=body.evidence
    )
    return _result(job_id, attempt, request.auth)
