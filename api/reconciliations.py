"""Pull-mode reconciliation over the API: an agent claims unknown work of its actions and answers.

    POST /api/v1/reconciliations/claim            {agent, actions?, tenants?} -> 201 or 204
    POST /api/v1/reconciliations/{id}/outcome     {agent, outcome, reason, evidence, result_ref}

The rules are `reconciliation.pulling`'s (and every reconciler's): an answer after the lease moved
on, or for a job whose action agents do not reconcile, is refused with 409 and counted on the token
(`answers_refused`, in /admin/ and /metrics), not written to the history. Each answer is recorded
under the agent's name and the token's (`agent [token NAME PREFIX]`), and the token's issuer stands
behind it: nobody may approve a replay their own token's answer led to.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from django.db.models import F
from django.http import HttpRequest, HttpResponse
from ninja import Path, Schema
from ninja.responses import Status
from pydantic import Field

from api.http import ApiError, check_reach
from api.models import ALL, WorkerToken
from api.schemas import (
    NOT_THE_GATEWAYS,
    ActionName,
    Attempt,
    Evidence,
    LeasedJob,
    OptionalText,
    Reference,
    Request,
    Tenant,
    WorkerName,
)
from api.tokens import holder_name
from api.views import answers, api, attempt_json, job_json
from reconciliation import pulling
from reconciliation.resolution import By

ReconciliationId = Annotated[
    str, Path(min_length=7, max_length=100, pattern=r"^[0-9]{1,18}-[0-9]{1,18}-[0-9]{1,10}-[0-9]{1,20}$",
              description="The reconciliation lease, as the claim returned it.")
]


class ReconciliationClaimRequest(Request):
    agent: WorkerName = Field(description="Who looks the effects up; recorded with each answer.")
    actions: list[ActionName] | None = Field(default=None, min_length=1, max_length=100,
                                             description="Only these actions (in the token's scope).")
    tenants: list[Tenant] | None = Field(default=None, min_length=1, max_length=100,
                                         description="Only these tenants (in the token's scope).")


class Reconciliation(Schema):
    reconciliation_id: str = Field(description="Name it when answering.")
    lease_expires_at: datetime = Field(description="Answer before this; later, another agent may take the job.")
    job: LeasedJob
    attempt: Attempt
    evidence_so_far: dict = Field(description="What the provider answered the worker, as recorded.")


class OutcomeRequest(Request):
    agent: WorkerName
    outcome: Literal["confirmed", "not_found", "conflict", "unavailable"] = Field(
        description="confirmed: the effect happened; not_found: it did not (say why in reason); conflict: "
                    "something else is there; unavailable: the provider could not tell (looked again later)."
    )
    reason: OptionalText = Field(default="", description="Required for not_found: why a replay is safe.")
    evidence: Evidence = Field(default_factory=dict,
                               description=f"What the provider said, kept with the check. {NOT_THE_GATEWAYS}")
    result_ref: Reference = Field(default="", description="The provider's reference for the effect, if confirmed.")
    asked: Reference = Field(
        default="", description="Where the agent looked (the provider's endpoint or account, as the attempt's sent_to "
                                "names where the effect went); when they differ, not_found counts as unavailable.")


class Applied(Schema):
    job_id: str
    outcome: str
    applied: str = Field(description="What the ledger did: succeeded, replayed, awaiting_approval, escalated, "
                                     "retry in N s, needs_operator.")
    note: str


def _within(token: WorkerToken, body: ReconciliationClaimRequest) -> tuple[list[str], list[str] | None]:
    """What to claim from: the request's actions and tenants, which must lie within the token's reach
    (by default: every action it reaches, which a "*" makes every action but the MCP gateway's; every
    tenant it may see, None for all). Naming what the token does not reach is refused, as for claims."""
    actions, tenants = body.actions, body.tenants
    check_reach(token, tenants=tenants, actions=actions, doing="reconcile")
    if tenants is None and ALL not in token.tenants:
        tenants = list(token.tenants)
    return (actions if actions is not None else token.actions_reached()), tenants


@api.post(
    "/reconciliations/claim",
    operation_id="claimReconciliation",
    summary="Claim the most overdue unknown job your agents reconcile (pull mode)",
    **answers({201: (Reconciliation, "claimed, with a reconciliation lease"),
               204: (None, "nothing is due in scope")}, 400, 401, 403, 413, 415,
              links={201: {"answer": {"operationId": "answerReconciliation",
                                      "parameters": {"reconciliation_id": "$response.body#/reconciliation_id"}},
                           "read": {"operationId": "getJob", "parameters": {"job_id": "$response.body#/job/job_id"}},
                           "history": {"operationId": "getJobEvents",
                                       "parameters": {"job_id": "$response.body#/job/job_id"}}}},
              error_texts={403: "the request names a tenant or action outside the token's scope"}),
)
def claim(request: HttpRequest, body: ReconciliationClaimRequest):
    token = request.auth
    actions, tenants = _within(token, body)
    claimed = pulling.claim_reconciliation(allows=token.reaches, actions=actions, tenants=tenants)
    if claimed is None:
        return HttpResponse(status=204)
    return Status(201, {
        "reconciliation_id": claimed.token,
        "lease_expires_at": claimed.expires_at,
        "job": job_json(claimed.job, token, attempts=False),
        "attempt": attempt_json(claimed.attempt, token),
        "evidence_so_far": claimed.evidence_so_far,
    })


@api.post(
    "/reconciliations/{reconciliation_id}/outcome",
    operation_id="answerReconciliation",
    summary="What the provider says happened to the unknown attempt",
    **answers({200: (Applied, "applied under the same rules as every reconciler")}, 400, 401, 404, 413, 415,
              conflict="answer_refused: the reconciliation lease moved on, or the job's action is not "
                       "reconciled by agents (nothing changed; the refusal is counted on the token)"),
)
def answer(request: HttpRequest, reconciliation_id: ReconciliationId, body: OutcomeRequest):
    from ledger.models import Job

    job_pk = int(reconciliation_id.split("-")[0])
    job = Job.objects.filter(pk=job_pk).only("tenant", "action").first()
    if job is None or not request.auth.reaches(tenant=job.tenant, action=job.action):
        raise ApiError(404, "not_found", "no such reconciliation")
    token = request.auth
    # The token's issuer stands behind its answers: they may not approve what one led to.
    by = By(holder_name(token, body.agent), "reconciler", token.created_by)
    try:
        decision = pulling.answer_reconciliation(
            token=reconciliation_id, by=by, outcome=body.outcome, reason=body.reason,
            evidence=body.evidence, result_ref=body.result_ref, asked=body.asked,
        )
    except pulling.AnswerRefused as refused:
        WorkerToken.objects.filter(pk=token.pk).update(answers_refused=F("answers_refused") + 1)
        raise ApiError(409, "answer_refused", str(refused)) from None
    return {"job_id": decision.job_id, "outcome": decision.outcome, "applied": decision.applied, "note": decision.note}
