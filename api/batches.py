"""Batched steps over HTTP: a worker claims up to N jobs, begins their side effects, and records their
results, one request per step for the whole batch.

    POST /api/v1/claims            {worker, max: N, ...}          -> 201 {"leases": [Lease, ...]} or 204
    POST /api/v1/leases/begin      {leases: [{job_id, owner, fencing_token}], sent_to?}
    POST /api/v1/leases/results    {results: [{job_id, owner, fencing_token, outcome, ...}]}

Each is ledger.services' batch step (claim_next_jobs, begin_side_effects, record_results): one
transaction per step, so the begin's one commit makes every begun effect durable before the worker
sends any. Each item is answered in its place: the job's status and attempt, or the refusal of that
job alone (stale_lease, not_found, invalid_transition...) in the shape of the API's errors, with
every other item done. `max` 1 (the default) is today's claim and answers one Lease.
"""

from __future__ import annotations

import json
from typing import Literal

from django.http import HttpRequest
from ninja import Schema
from pydantic import Field

from api.http import refusal
from api.schemas import (
    MAX_BATCH,
    NOT_THE_GATEWAYS,
    Attempt,
    Evidence,
    FencingToken,
    JobId,
    OptionalText,
    Reference,
    Request,
    Status,
    WorkerName,
)
from api.tokens import holder_name
from api.views import LEASE_ERRORS, _result, _scope, answered, answers, api
from ledger import services

# -- schemas --------------------------------------------------------------------------------------


class LeaseItem(Request):
    job_id: JobId
    owner: WorkerName = Field(description="The worker that holds the lease, as given when claiming.")
    fencing_token: FencingToken


class BatchBeginRequest(Request):
    leases: list[LeaseItem] = Field(min_length=1, max_length=MAX_BATCH)
    sent_to: Reference = Field(default="", description="Where the side effects are about to go (as for one "
                                                       "job's begin); recorded on each attempt.")


class ResultItem(LeaseItem):
    """One lease's result. One shape for the three outcomes (a worker sends what it has): `error`
    and `reason` say why a failure or an unknown, as for one job; a result without it is recorded
    saying that the worker gave none."""

    outcome: Literal["succeeded", "failed", "unknown"]
    result_ref: Reference = Field(default="", description="succeeded: the provider's reference for the effect.")
    error: OptionalText = Field(default="", description="failed: why the provider refused.")
    retryable: bool = Field(default=False, description="failed: queue the next attempt.")
    reason: OptionalText = Field(default="", description="unknown: why the worker cannot tell whether the effect "
                                                          "happened.")
    evidence: Evidence = Field(default_factory=dict,
                               description=f"What the worker saw, kept with the event. {NOT_THE_GATEWAYS}")


NO_ERROR = "the worker gave no reason for the failure"
NO_REASON = "the worker cannot tell whether the effect happened, and gave no reason"


class BatchResultsRequest(Request):
    results: list[ResultItem] = Field(min_length=1, max_length=MAX_BATCH)


class ItemRefusal(Schema):
    code: str = Field(description="As the one-job step's 4xx would say it: stale_lease, not_found, "
                                  "invalid_transition, invalid.")
    message: str


class ItemAnswer(Schema):
    job_id: str
    status: Status | None = Field(default=None, description="The job's status after this item; null if refused.")
    attempt: Attempt | None = Field(default=None, description="The attempt after this item; null if refused.")
    error: ItemRefusal | None = Field(default=None, description="Why this item alone was refused; null if done.")


class BatchAnswer(Schema):
    results: list[ItemAnswer] = Field(description="One per item, in the request's order.")


# -- begin and results ----------------------------------------------------------------------------

BATCH = "Every item is answered in its place: done, or refused alone (`error`); the others are done."


def _lease(request: HttpRequest, item: LeaseItem) -> services.Lease:
    return services.Lease(job_id=item.job_id, attempt_id=None, attempt_number=None,
                          owner=holder_name(request.auth, item.owner), token=item.fencing_token, expires_at=None)


def _answer(request: HttpRequest, job_id: str, done) -> dict:
    if isinstance(done, services.NotInScope):  # as for one job: outside the scope is no job
        return {"job_id": job_id, "status": None, "attempt": None,
                "error": {"code": "not_found", "message": "no such job"}}
    if isinstance(done, services.LedgerError):
        said = json.loads(refusal(request, done).content)["error"]
        return {"job_id": job_id, "status": None, "attempt": None,
                "error": {"code": said["code"], "message": said["message"]}}
    return {**_result(job_id, done, request.auth), "error": None}


@api.post(
    "/leases/begin",
    operation_id="beginSideEffects",
    summary="Begin the side effects of many leases in one transaction; only then call the providers",
    **answers({200: (BatchAnswer, "the side effect of each item answered with an attempt is submitted, "
                                  "durably: send those, and only those. " + BATCH)}, *LEASE_ERRORS),
)
def begin_many(request: HttpRequest, body: BatchBeginRequest):
    begun = services.begin_side_effects(leases=[_lease(request, item) for item in body.leases],
                                        sent_to=body.sent_to, scope=_scope(request))
    return answered(request, 200, {"results": [_answer(request, item.job_id, done)
                                               for item, done in zip(body.leases, begun, strict=True)]})


def _outcome(request: HttpRequest, item) -> services.Outcome:
    lease = _lease(request, item)
    if item.outcome == "succeeded":
        return services.Outcome.succeeded(lease, item.result_ref, item.evidence)
    if item.outcome == "failed":
        return services.Outcome.failed(lease, item.error.strip() or NO_ERROR, retryable=item.retryable,
                                       evidence=item.evidence)
    return services.Outcome.unknown(lease, item.reason.strip() or NO_REASON, item.evidence)


@api.post(
    "/leases/results",
    operation_id="recordResults",
    summary="Record the results of many leases in one transaction (succeeded, failed or unknown each)",
    **answers({200: (BatchAnswer, "recorded. " + BATCH)}, *LEASE_ERRORS),
)
def record_many(request: HttpRequest, body: BatchResultsRequest):
    done = services.record_results(outcomes=[_outcome(request, item) for item in body.results],
                                   scope=_scope(request))
    return answered(request, 200, {"results": [_answer(request, item.job_id, one)
                                               for item, one in zip(body.results, done, strict=True)]})
