"""The worker loop's ordinary steps for a caller that names a job by id and its lease by owner and
fencing token, and acts within a scope of tenants and actions (the HTTP API): the scope check,
finding the attempt the token names, and the step's database function, in one round trip.

Each function here is the fast path of its step in worker.py (the same generated function, the
same arguments) with the lookups the API did before it folded into the statement: it changes the
ledger exactly when that fast path would, and returns what it returns. Anything else returns None
having changed nothing (a job outside the scope is not touched: the function is never called on
it), and the caller goes on with the general path, which decides, records and refuses.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from django.db import connection
from psycopg.types.json import Jsonb

from ledger.models import Attempt, Job
from ledger.services.worker import (
    LEASE_COLUMNS,
    Lease,
    _ungated_actions,
    attempt_from_row,
    fetch_step_row,
    recorded_sent_to,
)
from ledger.states import JobStatus

ATTEMPT_SELECT = ", ".join(f"a.{field.column}" for field in Attempt._meta.concrete_fields)
IN_SCOPE = ("(%(tenants)s::text[] IS NULL OR j.tenant = ANY(%(tenants)s::text[])) "
            "AND (%(actions)s::text[] IS NULL OR j.action = ANY(%(actions)s::text[]))")
HELD = ("CROSS JOIN LATERAL (SELECT id FROM ledger_attempt WHERE job_id = j.id AND lease_token = %(token)s) held")

# What the answer to a claim shows of the job: fields a claim never changes, read with the claim.
JOB_FIELDS = ("job_id", "tenant", "action", "payload", "identity", "idempotency_key", "created_at")

CLAIM = f"""
SELECT {", ".join(f"j.{name}" for name in JOB_FIELDS)}, statement_timestamp(),
       {", ".join(f"a.{column}" for column in LEASE_COLUMNS.split(", "))}
FROM ledger_job j CROSS JOIN LATERAL reckon_claim(j.job_id, %(worker)s, %(ttls)s, %(own)s) a
WHERE j.job_id = %(job)s AND {IN_SCOPE}
"""  # nosec B608  # column and table names from the models; every value is a bound parameter
BEGIN = f"""
SELECT {ATTEMPT_SELECT} FROM ledger_job j {HELD}
CROSS JOIN LATERAL reckon_begin(j.job_id, held.id, %(owner)s, %(token)s, %(ttls)s, %(sent_to)s) a
WHERE j.job_id = %(job)s AND {IN_SCOPE}
"""  # nosec B608  # as above
SUCCEED = f"""
SELECT {ATTEMPT_SELECT} FROM ledger_job j {HELD}
CROSS JOIN LATERAL reckon_succeed(j.job_id, held.id, %(owner)s, %(token)s, %(result_ref)s, %(evidence)s) a
WHERE j.job_id = %(job)s AND {IN_SCOPE}
"""  # nosec B608  # as above


@dataclass(frozen=True)
class Scope:
    """Tenants and actions a caller may act for; None: all."""

    tenants: Collection[str] | None
    actions: Collection[str] | None

    def params(self) -> dict:
        return {"tenants": None if self.tenants is None else list(self.tenants),
                "actions": None if self.actions is None else list(self.actions)}


def claim_in_scope(*, job_id: str, worker: str, scope: Scope) -> tuple[Lease, Job] | None:
    """claim_job's fast path on a job in `scope`: the lease, and the job as the claim left it
    (running, updated by this statement)."""
    row = fetch_step_row(CLAIM, {"job": job_id, "worker": worker, "ttls": _ungated_actions(),
                           "own": not connection.in_atomic_block, **scope.params()})
    if row is None:
        return None
    values = dict(zip(JOB_FIELDS, row, strict=False))
    for name in ("payload", "identity"):
        values[name] = Job._meta.get_field(name).from_db_value(values[name], None, connection)
    job = Job(**values, status=JobStatus.RUNNING, updated_at=row[len(JOB_FIELDS)])
    return Lease(job_id, *row[len(JOB_FIELDS) + 1:]), job


def begin_in_scope(*, job_id: str, owner: str, token: int, scope: Scope, sent_to: str = "") -> Attempt | None:
    return attempt_from_row(fetch_step_row(BEGIN, {"job": job_id, "owner": owner, "token": token, "ttls": _ungated_actions(),
                                     "sent_to": recorded_sent_to(sent_to), **scope.params()}))


def succeed_in_scope(*, job_id: str, owner: str, token: int, result_ref: str, evidence: dict | None,
                     scope: Scope) -> Attempt | None:
    return attempt_from_row(fetch_step_row(SUCCEED, {"job": job_id, "owner": owner, "token": token, "result_ref": result_ref,
                                       "evidence": Jsonb(evidence or {}), **scope.params()}))
