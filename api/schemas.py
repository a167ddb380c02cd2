"""The worker API's request and response schemas: what validates a request is what the OpenAPI
document publishes, so a request the document allows is never refused for its shape.

Requests are strict: no field the schema does not name, no type coercion ("1" is not 1), no
trimming. Every refusal the server makes about a field is a constraint here (pattern, length,
range, enum), and a pattern that refuses a value says its rule in words.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Annotated, Literal

from ninja import Path, Schema
from pydantic import AfterValidator, BeforeValidator, ConfigDict, Field, ValidationError, WrapValidator
from pydantic_core import PydanticCustomError

from api import json_values
from ledger.actions import GATEWAY_RESULT, registered_actions
from ledger.identifiers import (
    JOB_ID_MAX_LENGTH,
    JOB_ID_SEGMENT_PATTERN,
    NAME_MAX_LENGTH,
    NAME_PATTERN,
    NAME_RULE,
)
from ledger.states import Delivery, Execution, JobStatus, SideEffect
from reconciliation.registry import JOB_DECISIONS

MAX_BIGINT = 2**63 - 1
# Printable ASCII, no space at either end: what a worker calls itself is shown and compared.
WORKER_PATTERN = r"^[!-~](?:[ -~]*[!-~])?$"
# Human text (an error, a reason): something besides whitespace, and no NUL.
TEXT_PATTERN = r"^[^\u0000]*[^\s\u0000][^\u0000]*$"
# A provider's reference (a message id): one line, no control characters, may be empty.
REFERENCE_PATTERN = r"^[^\u0000-\u001f\u007f]*$"
JOB_ID_SEGMENT_RULE = (
    f"a job id here is 1 to {JOB_ID_MAX_LENGTH} characters: ASCII letters, digits and . _ : @ -, "
    "starting with a letter or digit, never '..' ('/' is not allowed: the API addresses a job "
    "as one URL path segment)"
)


def _explained(rule: str) -> WrapValidator:
    """Say the rule when a pattern refuses a value, rather than quote the regular expression."""

    def explain(value, handler):
        try:
            return handler(value)
        except ValidationError as exc:
            if exc.errors()[0]["type"] == "string_pattern_mismatch":
                raise PydanticCustomError("string_pattern_mismatch", rule) from None
            raise

    return WrapValidator(explain)


def string(max_length: int, pattern: str, rule: str, *, min_length: int = 1, description: str = ""):
    """A string field; its rule is published with the pattern and given back when a value breaks it."""
    return Annotated[
        str,
        Field(
            min_length=min_length,
            max_length=max_length,
            pattern=pattern,
            description=f"{description} Rule: {rule}.".strip(),
        ),
        _explained(rule),
    ]


def _integral(value):
    """JSON Schema's integer is any number without a fraction: 2.0 and 2e0 are the integer 2."""
    if isinstance(value, Decimal) and value.is_finite() and value == value.to_integral_value():
        return int(value)
    return value


JobId = string(
    JOB_ID_MAX_LENGTH,
    JOB_ID_SEGMENT_PATTERN,
    JOB_ID_SEGMENT_RULE,
    description="The caller's id for the logical job; enqueueing it again is idempotent.",
)
JobIdInPath = Annotated[
    str,
    Path(
        min_length=1,
        max_length=JOB_ID_MAX_LENGTH,
        pattern=JOB_ID_SEGMENT_PATTERN,
        description="A job id; one that no job could have answers 404 like any unknown job.",
    ),
]
Tenant = string(NAME_MAX_LENGTH, NAME_PATTERN, f"a tenant name is {NAME_RULE}")
# The registry is complete once the apps are ready, which is before any URL is resolved.
ActionName = Literal[tuple(action.name for action in registered_actions())]
WorkerName = string(200, WORKER_PATTERN, "printable ASCII, with no space at either end")
FencingToken = Annotated[
    int,
    Field(ge=1, le=MAX_BIGINT, description="The lease's fencing token, from the claim."),
    BeforeValidator(_integral),
]
Text = string(2000, TEXT_PATTERN, "must contain something besides whitespace, and no NUL")
Reference = string(500, REFERENCE_PATTERN, "one line, with no control characters", min_length=0)
# Human text that may be empty (a reason given only for some answers): no NUL, which the
# database's JSON cannot hold.
OptionalText = string(2000, r"^[^\u0000]*$", "no NUL", min_length=0)
JsonObject = Annotated[
    dict, AfterValidator(json_values.stored_object), json_values.DescribedBy(json_values.JsonObject)
]


def _not_the_gateways(evidence: dict) -> dict:
    if GATEWAY_RESULT in evidence:
        raise ValueError(
            f"{GATEWAY_RESULT!r} is refused: it is where the MCP gateway records a tool's result, and the gateway "
            "answers the agent's next identical call from it, so only the gateway and its reconciler write it; "
            "keep what the provider said under another key"
        )
    return evidence


# What a worker or an agent saw, kept with the event: any JSON object but the gateway's record of a result.
NOT_THE_GATEWAYS = f"Any key but {GATEWAY_RESULT!r}, the MCP gateway's record of a tool's result."
Evidence = Annotated[JsonObject, AfterValidator(_not_the_gateways), json_values.WithoutKey(GATEWAY_RESULT)]


class Request(Schema):
    model_config = ConfigDict(extra="forbid", strict=True)


# -- requests -----------------------------------------------------------------------------------


class EnqueueRequest(Request):
    job_id: JobId
    tenant: Tenant
    action: ActionName = Field(description="A registered action, e.g. mail.send.")
    payload: JsonObject
    identity: JsonObject = Field(
        default_factory=dict, description="The identity the work must run as (profile, account)."
    )


class ClaimRequest(Request):
    worker: WorkerName = Field(description="Who takes the lease; unique per delivery.")


MAX_WAIT_SECONDS = 30
WaitSeconds = Annotated[
    int,
    Field(
        ge=0,
        le=MAX_WAIT_SECONDS,
        description="How long to wait for work when none is claimable now (0: answer at once).",
    ),
    BeforeValidator(_integral),
]


MAX_BATCH = 100  # jobs per batched step (api/batches.py)
BatchSize = Annotated[
    int,
    Field(ge=1, le=MAX_BATCH, description=(
        f"Claim up to this many jobs at once (1 to {MAX_BATCH}). 1, the default, answers one Lease; more "
        'answers {"leases": [...]}, the oldest first, each with its own fencing token.')),
    BeforeValidator(_integral),
]


class ClaimNextRequest(Request):
    worker: WorkerName = Field(description="Who takes the lease; unique per delivery.")
    actions: list[ActionName] | None = Field(
        default=None,
        min_length=1,
        max_length=100,
        description=(
            "Only jobs of these actions (within the token's scope). Omitted: every external action "
            "the token may run; a job of an in-process action is handed out only when named here."
        ),
    )
    tenants: list[Tenant] | None = Field(
        default=None,
        min_length=1,
        max_length=100,
        description="Only jobs of these tenants (within the token's scope). Omitted: every tenant the token may see.",
    )
    wait_seconds: WaitSeconds = 0
    max: BatchSize = 1


class LeaseRequest(Request):
    owner: WorkerName = Field(description="The worker that holds the lease, as given when claiming.")
    fencing_token: FencingToken


class BeginRequest(LeaseRequest):
    sent_to: Reference = Field(
        default="",
        description=(
            "Where the side effect is about to go: the provider's endpoint or account as this worker is "
            "configured (https://billing.example/acct_123, smtp://mail.example:587). A reconciler that "
            "would ask another provider answers unavailable instead of not_found. Credentials, query "
            "and fragment of a URL are not kept."
        ),
    )


class IdentityRequest(LeaseRequest):
    observed: JsonObject = Field(description="The identity the worker really runs as.")


class SuccessRequest(LeaseRequest):
    result_ref: Reference = Field(
        default="", description="The provider's reference for the effect (a message id)."
    )
    evidence: Evidence = Field(
        default_factory=dict, description=f"What the worker saw, kept with the event. {NOT_THE_GATEWAYS}"
    )


class FailureRequest(LeaseRequest):
    error: Text = Field(description="Why the provider refused.")
    retryable: bool = Field(default=False, description="Queue the next attempt.")
    evidence: Evidence = Field(
        default_factory=dict, description=f"What the worker saw, kept with the event. {NOT_THE_GATEWAYS}"
    )


class UnknownRequest(LeaseRequest):
    reason: Text = Field(description="Why the worker cannot tell whether the effect happened.")
    evidence: Evidence = Field(
        default_factory=dict, description=f"What the worker saw, kept with the event. {NOT_THE_GATEWAYS}"
    )


# -- responses ----------------------------------------------------------------------------------

DeliveryState = Literal[tuple(Delivery.values)]
ExecutionState = Literal[tuple(Execution.values)]
SideEffectState = Literal[tuple(SideEffect.values)]
Status = Literal[tuple(JobStatus.values)]


class Attempt(Schema):
    number: int
    delivery: DeliveryState
    execution: ExecutionState
    side_effect: SideEffectState
    lease_owner: str = Field(description="The lease's owner; empty unless a worker of this token holds it.")
    fencing_token: int | None = Field(description="The lease's fencing token; null unless a worker of this token "
                                                   "holds it.")
    lease_expires_at: datetime | None
    heartbeat_at: datetime | None
    observed_identity: dict | None
    sent_to: str = Field(description="Where the side effect was sent, as the worker said when it began; \"\": not said.")
    result_ref: str
    error: str
    version: int
    created_at: datetime
    updated_at: datetime


class LeasedJob(Schema):
    job_id: str
    tenant: str
    action: str
    payload: dict
    identity: dict
    idempotency_key: str = Field(description="Send it on every provider call.")
    status: Status
    created_at: datetime
    updated_at: datetime


class Job(LeasedJob):
    attempts: list[Attempt]


class OpenDecision(Schema):
    """A decision a person may take on the job now, in the console (`reconciliation.registry`)."""

    name: Literal[tuple(decision.name for decision in JOB_DECISIONS)]
    label: str
    role: str = Field(description="The console role that may take it.")
    help: str


class JobRecord(Job):
    decisions: list[OpenDecision] = Field(
        description="What a person may decide on the job in its state now, in the console; empty when nothing waits.")


class Lease(Schema):
    job_id: str
    attempt: int
    owner: str
    fencing_token: int
    expires_at: datetime
    ttl_seconds: float = Field(description="The lease's length: renew well within it while a step runs.")
    job: LeasedJob


class Leases(Schema):
    leases: list[Lease] = Field(description="The jobs claimed (at least one), oldest first.")


class Result(Schema):
    job_id: str
    status: Status
    attempt: Attempt


class Event(Schema):
    id: int
    at: datetime
    attempt: int | None = Field(description="The attempt's number, if the event is about one.")
    actor_type: str = Field(description="worker, reconciler, operator, approver or system.")
    actor: str = Field(description="Who: a worker or agent of this token is named with the token "
                                   "(`name [token NAME PREFIX]`); another token's worker is not named.")
    kind: str
    before: dict
    after: dict
    note: str
    evidence: dict
    hash: str = Field(description="This event's link in the job's SHA-256 hash chain.")


class ErrorDetail(Schema):
    code: str = Field(description="Stable and machine-readable, e.g. stale_lease.")
    message: str
    reason: str | None = Field(default=None, description="Why a claim was refused (409 claim_refused).")
    fields: dict[str, str] | None = Field(default=None, description="What is wrong with each field (400).")


class Error(Schema):
    error: ErrorDetail
