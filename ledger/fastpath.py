"""The one seam to the steps' database functions (ledger/stepsql.py generates them): one
statement per step, which every door (the worker service, the HTTP API, the MCP gateway) reaches
through ledger.services.worker and ledger.services.batches, as Oban's Engine is its seam. A
statement returns the function's row, or no row having changed nothing: the caller then takes
the Python path, which decides and records.
"""

from __future__ import annotations

import psycopg
from django.conf import settings
from django.db import connection
from psycopg.types.json import Jsonb

from ledger.actions import registered_actions
from ledger.models import Attempt, Job
from ledger.scope import EVERYTHING, Scope
from ledger.states import JobStatus

# Each step's statement names the job by id and may carry a scope (the tenants and actions a
# caller may act for: the API's token); a job outside the scope is never handed to the function.
# begin and succeed name the attempt by id, or (the API, which knows only the fencing token) by the
# token it was leased with. A statement returns the function's row, or no row having changed
# nothing: the caller (ledger.services.worker) then takes the Python path, which decides and records.

LEASE_COLUMNS = ("id", "number", "lease_owner", "lease_token", "lease_expires_at")  # Lease's fields after job_id
ATTEMPT_FIELDS = [field.attname for field in Attempt._meta.concrete_fields]
ATTEMPT_SELECT = ", ".join(f"a.{field.column}" for field in Attempt._meta.concrete_fields)
OBSERVED_IDENTITY = Attempt._meta.get_field("observed_identity")
# What a claim's answer shows of the job: fields a claim never changes, read with the claim.
JOB_FIELDS = ("job_id", "tenant", "action", "payload", "identity", "idempotency_key", "created_at")

IN_SCOPE = ("(%(tenants)s::text[] IS NULL OR j.tenant = ANY(%(tenants)s::text[])) "
            "AND (%(actions)s::text[] IS NULL OR j.action = ANY(%(actions)s::text[]))")
ATTEMPT = ("coalesce(%(attempt)s::bigint, "
           "(SELECT id FROM ledger_attempt WHERE job_id = j.id AND lease_token = %(token)s))")

STATEMENTS = {
    "claim": f"""
SELECT {", ".join(f"j.{name}" for name in JOB_FIELDS)}, statement_timestamp(),
       {", ".join(f"a.{column}" for column in LEASE_COLUMNS)}
FROM ledger_job j CROSS JOIN LATERAL reckon_claim(j.job_id, %(worker)s, %(ttls)s, %(own)s) a
WHERE j.job_id = %(job)s AND {IN_SCOPE}
""",  # nosec B608  # column and table names from the models; every value is a bound parameter
    # A caller that begins the side effect as soon as it holds the lease (the MCP gateway): both
    # functions in one statement, the claim not on its own (so its commit waits for the WAL flush,
    # as begin's must); begin sees what the claim wrote (each runs its statements on a new snapshot).
    "claim_begin": f"""
SELECT {", ".join(f"j.{name}" for name in JOB_FIELDS)}, statement_timestamp(),
       {", ".join(f"c.{column}" for column in LEASE_COLUMNS)}, b.id
FROM ledger_job j CROSS JOIN LATERAL reckon_claim(j.job_id, %(worker)s, %(ttls)s, false) c
LEFT JOIN LATERAL reckon_begin(j.job_id, c.id, %(worker)s, c.lease_token, %(ttls)s, %(sent_to)s) b ON true
WHERE j.job_id = %(job)s AND {IN_SCOPE}
""",  # nosec B608  # as above
    # A new job that its caller claims and begins at once (the MCP gateway): enqueue, claim and
    # begin in one statement and one durable commit. Each function runs its statements on a new
    # snapshot, so the claim sees the job the enqueue inserted, and begin the claim's lease. The claim
    # names `e` (an empty string of it) so that it runs for the enqueued row only, after it. LIMIT 1
    # tells the planner so: a set-returning function is estimated at 1,000 rows, and the three
    # nested (10^9) cost enough that PostgreSQL JIT-compiled the statement, 2.5 s a call (measured).
    "enqueue_claim_begin": f"""
SELECT e.created_at, {", ".join(f"c.{column}" for column in LEASE_COLUMNS)}, b.id
FROM (SELECT * FROM reckon_enqueue(%(job)s, %(tenant)s, %(action)s, %(payload)s, %(identity)s, %(policy)s,
                                   %(key)s, %(actor)s, %(actor_type)s) LIMIT 1) e
CROSS JOIN LATERAL reckon_claim(%(job)s || left(e.id::text, 0), %(worker)s, %(ttls)s, false) c
LEFT JOIN LATERAL reckon_begin(%(job)s, c.id, %(worker)s, c.lease_token, %(ttls)s, %(sent_to)s) b ON true
""",  # nosec B608  # as above
    "begin": f"""
SELECT {ATTEMPT_SELECT} FROM ledger_job j
CROSS JOIN LATERAL reckon_begin(j.job_id, {ATTEMPT}, %(owner)s, %(token)s, %(ttls)s, %(sent_to)s) a
WHERE j.job_id = %(job)s AND {IN_SCOPE}
""",  # nosec B608  # as above
    "succeed": f"""
SELECT {ATTEMPT_SELECT} FROM ledger_job j
CROSS JOIN LATERAL reckon_succeed(j.job_id, {ATTEMPT}, %(owner)s, %(token)s, %(result_ref)s, %(evidence)s) a
WHERE j.job_id = %(job)s AND {IN_SCOPE}
""",  # nosec B608  # as above
}


# -- the same steps for N jobs: one statement each ------------------------------------------------
#
# A batch is the same door with N jobs: each statement calls the step's batch function (reckon_*_many)
# once for the batch, and returns a row for each job it took, numbered by its place in the batch
# (1 up); a job it left to the Python path changes nothing and has no row, and the caller takes that
# job alone through the one-job step (ledger.services.batches).
SCOPE_ARGUMENTS = "%(tenants)s::text[], %(actions)s::text[]"
BATCH_ATTEMPT_SELECT = ", ".join(f"(r.attempt).{field.column}" for field in Attempt._meta.concrete_fields)

BATCH_STATEMENTS = {
    # The oldest pending jobs in scope, claimed; a row with no lease is a job locked and left to the
    # Python path. As its own transaction the claims commit without waiting for the WAL flush (see
    # _claim): the batch's begin makes them durable before any effect is sent.
    "claim_next": f"""
SELECT {", ".join(f"(r.job).{name}" for name in JOB_FIELDS)}, statement_timestamp(),
       {", ".join(f"(r.attempt).{column}" for column in LEASE_COLUMNS)}
FROM reckon_claim_many(%(worker)s, %(limit)s::integer, %(ttls)s, {SCOPE_ARGUMENTS}, %(own)s) r
""",  # nosec B608  # column names from the models; every value is a bound parameter
    # The leases of a batch, as one JSON array: {job, attempt (null: the one leased with token),
    # owner, token, ...}.
    "begin": f"""
SELECT r.place, {BATCH_ATTEMPT_SELECT}
FROM reckon_begin_many(%(leases)s, %(ttls)s, {SCOPE_ARGUMENTS}) r
""",  # nosec B608  # as above
    "succeed": f"""
SELECT r.place, {BATCH_ATTEMPT_SELECT}
FROM reckon_succeed_many(%(leases)s, {SCOPE_ARGUMENTS}) r
""",  # nosec B608  # as above
}



def claim(*, job_id: str, worker: str, scope: Scope = EVERYTHING) -> tuple[Job, tuple] | None:
    """reckon_claim on a job in scope: the job as the claim left it (running) and the lease's
    columns (LEASE_COLUMNS), or None."""
    row = run_step("claim", {"job": job_id, "worker": worker, "ttls": ungated_actions(),
                             "own": not connection.in_atomic_block, **scope.params()})
    return None if row is None else _claimed(row)


def _claimed(row: tuple) -> tuple[Job, tuple]:
    values = dict(zip(JOB_FIELDS, row, strict=False))
    for name in ("payload", "identity"):
        values[name] = Job._meta.get_field(name).from_db_value(values[name], None, connection)
    job = Job(**values, status=JobStatus.RUNNING, updated_at=row[len(JOB_FIELDS)])
    return job, tuple(row[len(JOB_FIELDS) + 1:])


def claim_begin(*, job_id: str, worker: str, sent_to: str, scope: Scope = EVERYTHING) -> tuple[Job, tuple, bool] | None:
    """reckon_claim then reckon_begin in one statement: the job, the lease's columns, and whether
    the side effect was begun (a claim that begin declined is still a claim); None: not claimed."""
    row = run_step("claim_begin", {"job": job_id, "worker": worker, "ttls": ungated_actions(), "sent_to": sent_to,
                                   **scope.params()})
    if row is None:
        return None
    job, leased = _claimed(row[:-1])
    return job, leased, row[-1] is not None


def enqueue_claim_begin(*, job_id: str, tenant: str, action: str, payload: dict, identity: dict, policy: dict | None,
                        key: str, actor: str, actor_type: str, worker: str, sent_to: str) -> tuple[Job, tuple, bool] | None:
    """reckon_enqueue, reckon_claim and reckon_begin in one statement: the new job (running), the
    lease's columns, and whether the side effect was begun; None: nothing was enqueued and claimed
    (the id is taken, or the claim declined: then the job is enqueued, and the caller's general
    path finds it)."""
    row = run_step("enqueue_claim_begin", {
        "job": job_id, "tenant": tenant, "action": action, "payload": Jsonb(payload), "identity": Jsonb(identity),
        "policy": Jsonb(policy) if policy is not None else None, "key": key, "actor": actor,
        "actor_type": actor_type, "worker": worker, "ttls": ungated_actions(), "sent_to": sent_to,
    })
    if row is None:
        return None
    created_at, *leased, begun = row
    job = Job(job_id=job_id, tenant=tenant, action=action, payload=payload, identity=identity, policy=policy,
              idempotency_key=key, status=JobStatus.RUNNING, created_at=created_at, updated_at=created_at)
    return job, tuple(leased), begun is not None


def begin(*, job_id: str, attempt_id: int | None, owner: str, token: int, sent_to: str,
          scope: Scope = EVERYTHING) -> Attempt | None:
    """reckon_begin; `sent_to` as the attempt keeps it (ledger.endpoints.recorded)."""
    return _attempt(run_step("begin", {"job": job_id, "attempt": attempt_id, "owner": owner, "token": token,
                                       "ttls": ungated_actions(), "sent_to": sent_to, **scope.params()}))


def succeed(*, job_id: str, attempt_id: int | None, owner: str, token: int, result_ref: str,
            evidence: dict | None, scope: Scope = EVERYTHING) -> Attempt | None:
    return _attempt(run_step("succeed", {"job": job_id, "attempt": attempt_id, "owner": owner, "token": token,
                                         "result_ref": result_ref, "evidence": Jsonb(evidence or {}),
                                         **scope.params()}))


def claim_next(*, worker: str, limit: int, scope: Scope) -> tuple[list[tuple[Job, tuple]], list[str]]:
    """Up to `limit` of the oldest pending jobs in scope, claimed by reckon_claim_many in one
    statement: the claimed (the job and the lease's columns, oldest first) and the ids of the jobs
    the function declined (locked by the statement, unchanged: the Python path decides)."""
    rows = run_batch_step("claim_next", {"worker": worker, "limit": limit, "ttls": ungated_actions(),
                                         "own": not connection.in_atomic_block, **scope.params()})
    claimed = [_claimed(row) for row in rows if row[len(JOB_FIELDS) + 1] is not None]
    return claimed, [row[0] for row in rows if row[len(JOB_FIELDS) + 1] is None]


def begin_many(*, leases: list[dict], scope: Scope = EVERYTHING) -> dict[int, Attempt]:
    """reckon_begin_many on `leases` ({job, attempt, owner, token, sent_to}), in one statement:
    the begun attempts by their place in `leases`."""
    return _attempts_by_place(run_batch_step("begin", {"leases": Jsonb(leases), "ttls": ungated_actions(),
                                                       **scope.params()}))


def succeed_many(*, leases: list[dict], scope: Scope = EVERYTHING) -> dict[int, Attempt]:
    """reckon_succeed_many on `leases` ({job, attempt, owner, token, result_ref, evidence}), in
    one statement: the succeeded attempts by their place in `leases`."""
    return _attempts_by_place(run_batch_step("succeed", {"leases": Jsonb(leases), **scope.params()}))


def _attempts_by_place(rows: list[tuple]) -> dict[int, Attempt]:
    return {row[0] - 1: _attempt(row[1:]) for row in rows}


def run_batch_step(step: str, params: dict) -> list[tuple]:
    """A step's statement for N jobs (BATCH_STATEMENTS), the one way to its database function for a
    batch: every row it returns (tests watch this function, as run_step)."""
    connection.ensure_connection()
    raw = psycopg.Cursor(connection.connection)
    with (connection.make_debug_cursor(raw) if connection.queries_logged else connection.make_cursor(raw)) as cursor:
        cursor.execute(BATCH_STATEMENTS[step], params)
        return cursor.fetchall()


def run_step(step: str, params: dict) -> tuple | None:
    """The step's statement, the one way to its database function (tests watch this function)."""
    return fetch_row(STATEMENTS[step], params)


def fetch_row(sql: str, params) -> tuple | None:
    """One row of a statement, bound server-side, so psycopg prepares it after a few calls on a
    connection (DATABASES OPTIONS prepare_threshold): no parsing or planning per call, and no
    quoting of values in Python."""
    connection.ensure_connection()
    raw = psycopg.Cursor(connection.connection)
    with (connection.make_debug_cursor(raw) if connection.queries_logged else connection.make_cursor(raw)) as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone()


def _attempt(row: tuple | None) -> Attempt | None:
    if row is None:
        return None
    attempt = Attempt.from_db(connection.alias, ATTEMPT_FIELDS, row)
    attempt.observed_identity = OBSERVED_IDENTITY.from_db_value(attempt.observed_identity, None, connection)
    return attempt


def ungated_actions() -> Jsonb:
    """Actions the dead-man gate never holds, with their lease TTLs: the functions take only these."""
    gated = bool(settings.RECKON_GATE_BOUND_S)
    return Jsonb({
        action.name: action.lease_ttl.total_seconds()
        for action in registered_actions()
        if action.reversible or not gated
    })
