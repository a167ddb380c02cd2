"""The worker API's views: parse, check scope, call one ledger service, serialise.

Every transition is `ledger.services`; a lease-bound write rebuilds the Lease from the
attempt the caller's fencing token names, and the service's compare-and-set decides.
"""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.utils import timezone

from api.http import ApiError, endpoint, error_response, require_scope
from api.openapi import openapi_document
from api.validation import (
    Field,
    boolean,
    json_object,
    path_job_id,
    positive_integer,
    read_json_object,
    text,
    validate,
)
from ledger import services
from ledger.models import Attempt, Job

IDENTIFIER = text(200, identifier=True)
EVIDENCE = Field(json_object, required=False, default=dict)
LEASE_FIELDS = {"owner": Field(IDENTIFIER), "fencing_token": Field(positive_integer)}

ENQUEUE_FIELDS = {
    "job_id": Field(text(200, identifier=True, forbid="/")),
    "tenant": Field(text(100, identifier=True)),
    "action": Field(text(100, identifier=True)),
    "payload": Field(json_object),
    "identity": Field(json_object, required=False, default=dict),
}


# -- serialisation ------------------------------------------------------------------------------


def _time(value) -> str | None:
    return value.isoformat() if value else None


def attempt_json(attempt: Attempt) -> dict:
    return {
        "number": attempt.number,
        "delivery": attempt.delivery_state,
        "execution": attempt.execution_state,
        "side_effect": attempt.side_effect_state,
        "lease_owner": attempt.lease_owner,
        "fencing_token": attempt.lease_token,
        "lease_expires_at": _time(attempt.lease_expires_at),
        "heartbeat_at": _time(attempt.heartbeat_at),
        "observed_identity": attempt.observed_identity,
        "result_ref": attempt.result_ref,
        "error": attempt.error,
        "version": attempt.version,
        "created_at": _time(attempt.created_at),
        "updated_at": _time(attempt.updated_at),
    }


def job_json(job: Job, *, attempts: bool = True) -> dict:
    body = {
        "job_id": job.job_id,
        "tenant": job.tenant,
        "action": job.action,
        "payload": job.payload,
        "identity": job.identity,
        "idempotency_key": job.idempotency_key,
        "status": job.status,
        "created_at": _time(job.created_at),
        "updated_at": _time(job.updated_at),
    }
    if attempts:
        body["attempts"] = [attempt_json(a) for a in job.attempts.order_by("number")]
    return body


def lease_json(lease: services.Lease, job: Job) -> dict:
    return {
        "job_id": lease.job_id,
        "attempt": lease.attempt_number,
        "owner": lease.owner,
        "fencing_token": lease.token,
        "expires_at": _time(lease.expires_at),
        "job": job_json(job, attempts=False),
    }


def _result(job_id: str, attempt: Attempt) -> JsonResponse:
    job = Job.objects.get(job_id=job_id)
    return JsonResponse({"job_id": job.job_id, "status": job.status, "attempt": attempt_json(attempt)})


# -- loading ------------------------------------------------------------------------------------


def _job_in_scope(request: HttpRequest, job_id: str) -> Job:
    job_id = path_job_id(job_id)
    job = Job.objects.filter(job_id=job_id).first() if job_id else None
    if job is None:
        raise ApiError(404, "not_found", "no such job")
    require_scope(request.worker_token, tenant=job.tenant, action=job.action)
    return job


def _lease_from(job: Job, fields: dict) -> services.Lease:
    """The Lease the caller claims to hold; the service checks it against the attempt."""
    token = fields["fencing_token"]
    attempt = (
        Attempt.objects.filter(job=job, lease_token=token).first()
        # A token this job never issued: judge it against the latest attempt (and record it).
        or services.latest_attempt(job)
    )
    return services.Lease(
        job_id=job.job_id,
        attempt_id=attempt.pk,
        attempt_number=attempt.number,
        owner=fields["owner"],
        token=token,
        expires_at=attempt.lease_expires_at or timezone.now(),
    )


def _lease_write(request: HttpRequest, job_id: str, extra: dict[str, Field]):
    job = _job_in_scope(request, job_id)
    fields = validate(read_json_object(request), {**LEASE_FIELDS, **extra})
    return job, _lease_from(job, fields), fields


# -- endpoints ----------------------------------------------------------------------------------


@endpoint("POST")
def jobs(request: HttpRequest) -> JsonResponse:
    fields = validate(read_json_object(request), ENQUEUE_FIELDS)
    require_scope(request.worker_token, tenant=fields["tenant"], action=fields["action"])
    existing = Job.objects.filter(job_id=fields["job_id"]).first()
    if existing and not request.worker_token.allows(tenant=existing.tenant, action=existing.action):
        raise ApiError(409, "job_conflict", "this job id is already used by other work")
    existed = existing is not None
    job = services.enqueue_job(**fields, actor=f"api:{request.worker_token.name}")
    return JsonResponse(job_json(job), status=200 if existed else 201)


@endpoint("GET")
def job_detail(request: HttpRequest, job_id: str) -> JsonResponse:
    return JsonResponse(job_json(_job_in_scope(request, job_id)))


@endpoint("POST")
def claim(request: HttpRequest, job_id: str) -> JsonResponse:
    job = _job_in_scope(request, job_id)
    fields = validate(read_json_object(request), {"worker": Field(IDENTIFIER)})
    lease = services.claim_job(job_id=job.job_id, worker=fields["worker"])
    job.refresh_from_db()
    return JsonResponse(lease_json(lease, job), status=201)


@endpoint("POST")
def renew(request: HttpRequest, job_id: str) -> JsonResponse:
    job, lease, _ = _lease_write(request, job_id, {})
    lease = services.renew_lease(lease=lease)
    job.refresh_from_db()
    return JsonResponse(lease_json(lease, job))


@endpoint("POST")
def identity(request: HttpRequest, job_id: str) -> JsonResponse:
    job, lease, fields = _lease_write(request, job_id, {"observed": Field(json_object)})
    return _result(job.job_id, services.verify_identity(lease=lease, observed=fields["observed"]))


@endpoint("POST")
def begin(request: HttpRequest, job_id: str) -> JsonResponse:
    job, lease, _ = _lease_write(request, job_id, {})
    return _result(job.job_id, services.begin_side_effect(lease=lease))


@endpoint("POST")
def success(request: HttpRequest, job_id: str) -> JsonResponse:
    extra = {
        "result_ref": Field(text(500, allow_empty=True), required=False, default=""),
        "evidence": EVIDENCE,
    }
    job, lease, fields = _lease_write(request, job_id, extra)
    attempt = services.record_success(
        lease=lease, result_ref=fields["result_ref"], evidence=fields["evidence"]
    )
    return _result(job.job_id, attempt)


@endpoint("POST")
def failure(request: HttpRequest, job_id: str) -> JsonResponse:
    extra = {
        "error": Field(text(2000)),
        "retryable": Field(boolean, required=False, default=False),
        "evidence": EVIDENCE,
    }
    job, lease, fields = _lease_write(request, job_id, extra)
    attempt = services.record_failure(
        lease=lease, error=fields["error"], retryable=fields["retryable"], evidence=fields["evidence"]
    )
    return _result(job.job_id, attempt)


@endpoint("POST")
def unknown(request: HttpRequest, job_id: str) -> JsonResponse:
    job, lease, fields = _lease_write(request, job_id, {"reason": Field(text(2000)), "evidence": EVIDENCE})
    attempt = services.record_unknown(lease=lease, reason=fields["reason"], evidence=fields["evidence"])
    return _result(job.job_id, attempt)


@endpoint("GET", authenticated=False)
def openapi(request: HttpRequest) -> JsonResponse:
    return JsonResponse(openapi_document(), json_dumps_params={"indent": 1})


@endpoint("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", authenticated=False)
def not_found(request: HttpRequest, rest: str = "") -> JsonResponse:
    return error_response(404, "not_found", f"no API endpoint at {request.path}")
