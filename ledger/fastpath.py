"""The worker loop's three ordinary steps as database functions, generated from ledger/states.py,
and the plumbing that calls them (the last section): the one statement per step that every door
(the worker service, the HTTP API, the MCP gateway) reaches through ledger.services.worker.

claim -> begin side effect -> record success is the ledger's hot path. Each function does what
the Python transition (ledger.services.worker) does for the ordinary case, in one round trip:
lock the job row; then, in a new statement so it sees what the lock's previous holder wrote,
compare-and-set the attempt on every condition the Python path checks; update the job; insert
the event; all in the caller's transaction. It returns the changed attempt row. In any other
case it changes nothing and returns no row, and the Python path decides and records.

Every state, event kind and actor below comes from ledger.states, and the events' before/after
snapshots from ledger.services.transitions.snapshot itself, so the functions cannot drift from the
rules. Migrations freeze the text they install (0005 first) and never import this module: when
its output changes, tests/ledger/test_fast_path.py fails and names the migration to write.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass

import psycopg
from django.conf import settings
from django.db import connection, models
from psycopg.types.json import Jsonb

from ledger.actions import registered_actions
from ledger.models import Attempt, Job, LedgerEvent
from ledger.services.transitions import snapshot
from ledger.states import (
    CONSISTENCY,
    FINISHED_JOB,
    ActorType,
    Delivery,
    EventKind,
    Execution,
    JobStatus,
    SideEffect,
)

# A job enqueued while its action was irreversible stays so (Job.policy), whatever the action is
# declared as now: the dead-man gate's decision about it belongs to the Python path, so the
# functions leave such a job alone (the actions in p_ttls are those the gate never holds *now*).
ENQUEUED_IRREVERSIBLE = "coalesce((j.policy ->> 'reversible') = 'false', false)"


@dataclass(frozen=True)
class StepFunction:
    name: str
    arguments: str  # as pg_get_function_arguments() renders them
    body: str  # the text between the $$ quotes (pg_proc.prosrc)
    RESULT: str = "SETOF ledger_attempt"  # as pg_get_function_result() renders it

    LANGUAGE = "plpgsql"

    @property
    def create_sql(self) -> str:
        return (
            f"\nCREATE OR REPLACE FUNCTION {self.name}({self.arguments})\n"
            f"RETURNS {self.RESULT} LANGUAGE {self.LANGUAGE} AS $${self.body}$$;\n"
        )

    @property
    def drop_sql(self) -> str:
        types = ", ".join(argument.split(maxsplit=1)[1] for argument in self.arguments.split(","))
        return f"DROP FUNCTION IF EXISTS {self.name}({types})"


def step_functions() -> list[StepFunction]:
    """The functions, in the order a migration installs them."""
    return [_claim(), _begin(), _succeed(), _enqueue(), _claim_many(), _begin_many(), _succeed_many()]


def _sql(value) -> str:
    """A state, kind or other value as an SQL string literal."""
    text = str(value.value if hasattr(value, "value") else value)
    return "'" + text.replace("'", "''") + "'"


def _sql_list(values) -> str:
    return ", ".join(_sql(value) for value in values)


def _max_length(model, field: str) -> int:
    return model._meta.get_field(field).max_length


class _Column(str):
    """SQL standing in for a model field's value, so that snapshot() can be read as SQL."""


def snapshot_sql(job_status: str, **pinned) -> str:
    """transitions.snapshot(job, attempt) as a jsonb expression over the attempt row `a`.

    snapshot() itself runs, on a job whose status is the SQL `job_status` and an attempt whose
    every field holds its column: the keys, their order and what each reads come from it.
    `pinned` gives attempt fields whose value is known, written as literals (the state before
    a compare-and-set, which the updated row no longer shows).
    """
    job = Job(status=_Column(job_status))
    attempt = Attempt(**{f.attname: _Column(f"a.{f.column}") for f in Attempt._meta.concrete_fields})
    known = {f"a.{Attempt._meta.get_field(name).column}": _sql(value) for name, value in pinned.items()}
    pairs = []
    for key, value in snapshot(job, attempt).items():
        if not isinstance(value, _Column):
            raise TypeError(f"snapshot()[{key!r}] is computed in Python, not read from a column: "
                            "the fast path cannot write it")
        pairs.append(f"{_sql(key)}, {known.get(value, value)}")
    return f"jsonb_build_object({', '.join(pairs)})"


def states_before(execution: Execution, side_effect: SideEffect | None = None) -> dict:
    """The attempt's states before a compare-and-set that requires `execution` (and
    `side_effect`): the CHECK constraints (CONSISTENCY) must leave one possibility for the rest."""
    deliveries, side_effects = CONSISTENCY[execution]
    side_effects = (side_effect,) if side_effect else side_effects
    if len(deliveries or ()) != 1 or len(side_effects) != 1:
        raise ValueError(f"an attempt that is {execution.value} may be in more than one state: "
                         "the event's before snapshot would need the old row")
    return {
        "delivery_state": deliveries[0], "execution_state": execution, "side_effect_state": side_effects[0],
    }


EVENT_COLUMNS = ('job_id, attempt_id, at, actor_type, actor, kind, "before", "after", note, evidence, '
                 'prev_hash, hash')


def _event_values(*, actor: str, kind: EventKind, job_status: str, evidence: str, job: str = "j.id",
                  before: str = "before") -> str:
    """The event row's values, over the attempt row `a`; the reckon_hash_chain trigger fills in its
    hashes. Its time is taken now, after the job's lock (clock_timestamp()), not the statement's
    start (the column's default): a step that waited on the lock would otherwise stamp its event
    before the event of the step it waited for, and a job's chain, in id order, would go back in
    time, across a partition's boundary too (issue 28: a partition would leave with a link whose
    next event stays online)."""
    return (f"{job}, a.id, clock_timestamp(), {_sql(ActorType.WORKER)}, "
            f"left({actor}, {_max_length(LedgerEvent, 'actor')}), {_sql(kind)}, {before}, "
            f"{snapshot_sql(job_status)}, '', {evidence}, '', ''")


def _event_sql(*, actor: str, kind: EventKind, job_status: str, evidence: str) -> str:
    """The event of one job's step (its `before` snapshot in a variable)."""
    return (f"INSERT INTO ledger_ledgerevent ({EVENT_COLUMNS}) "  # nosec B608  # SQL generated from our own vocabulary (states.py), no input
            f"VALUES ({_event_values(actor=actor, kind=kind, job_status=job_status, evidence=evidence)});")


# What each step requires of the job and how it compare-and-sets the attempt, written once: the
# one-job functions (p_… arguments; j and a row variables) and the batch functions (each lease a
# row of l, each candidate a row of c) read the same rules with their own names.

def _claim_refuses() -> str:
    """A claim leaves the job to the Python path (which refuses it or decides otherwise)."""
    return (f"j.recovery_pending OR j.status IN ({_sql_list(FINISHED_JOB)})\n"
            f"       OR NOT p_ttls ? j.action OR {ENQUEUED_IRREVERSIBLE}")


def _claim_sets(*, worker: str, fence: str, now: str, action: str) -> str:
    return f"""version = version + 1, updated_at = statement_timestamp(),
        delivery_state = {_sql(Delivery.LEASED)}, execution_state = {_sql(Execution.RUNNING)},
        lease_owner = {worker}, lease_token = {fence},
        lease_expires_at = {now} + (p_ttls ->> {action})::float8 * interval '1 second', heartbeat_at = {now}"""


def _latest_attempt(job: str) -> str:
    return f"(SELECT id FROM ledger_attempt WHERE job_id = {job} ORDER BY number DESC LIMIT 1)"  # nosec B608  # SQL generated here, no input


def _claim_job_sets(fence: str) -> str:
    return f"status = {_sql(JobStatus.RUNNING)}, updated_at = statement_timestamp(), lease_seq = {fence}"


def _begin_refuses() -> str:
    return f"j.recovery_pending OR NOT p_ttls ? j.action OR {ENQUEUED_IRREVERSIBLE}"


def _begin_sets(*, now: str, sent_to: str) -> str:
    return f"""version = version + 1, updated_at = statement_timestamp(),
        side_effect_state = {_sql(SideEffect.SUBMITTED)}, heartbeat_at = {now}, sent_to = {sent_to}"""


# The lease must be this attempt's current, unexpired one; identity verified when the job has one.
def _begin_holds(*, attempt: str, job: str, owner: str, fence: str, now: str, identity: str) -> str:
    was = states_before(Execution.RUNNING, SideEffect.NOT_ATTEMPTED)
    return f"""id = {attempt} AND job_id = {job}
      AND execution_state = {_sql(was["execution_state"])} AND lease_owner = {owner}
      AND lease_token = {fence} AND lease_expires_at > {now}
      AND side_effect_state = {_sql(was["side_effect_state"])}
      AND ({identity} IS NULL OR {identity} = '{{}}'::jsonb OR observed_identity IS NOT NULL)"""


# A result may arrive after the lease expired, as long as no one else has taken the attempt.
# A job someone holds ("I'm on it") takes the Python path, which releases the hold as it finishes.
def _succeed_refuses() -> str:
    return "j.holder <> ''"


def _succeed_sets(result_ref: str) -> str:
    return f"""version = version + 1, updated_at = statement_timestamp(),
        delivery_state = {_sql(Delivery.ACKNOWLEDGED)}, execution_state = {_sql(Execution.SUCCEEDED)},
        side_effect_state = {_sql(SideEffect.CONFIRMED)},
        result_ref = left({result_ref}, {_max_length(Attempt, 'result_ref')})"""


def _succeed_holds(*, attempt: str, job: str, owner: str, fence: str) -> str:
    was = states_before(Execution.RUNNING, SideEffect.SUBMITTED)
    return f"""id = {attempt} AND job_id = {job}
      AND execution_state = {_sql(was["execution_state"])} AND lease_owner = {owner}
      AND lease_token = {fence} AND side_effect_state = {_sql(was["side_effect_state"])}"""


def _succeed_job_sets() -> str:
    return f"status = {_sql(JobStatus.SUCCEEDED)}, updated_at = statement_timestamp()"


# A claim need not be durable when it is its own transaction (p_own_transaction): if a crash
# loses it, the worker's next step (a compare-and-set on owner and token) is refused, and that
# step's synchronous commit flushes the WAL up to and including the claim. So the claim commits
# without waiting for the WAL flush; begin side effect and every result still wait for it.
def _claim() -> StepFunction:
    was = states_before(Execution.NOT_STARTED)
    running = _sql(JobStatus.RUNNING)
    claimed = _event_sql(
        actor="p_worker", kind=EventKind.CLAIMED, job_status=running,
        evidence="jsonb_build_object('fencing_token', token, 'lease_ttl_s', p_ttls -> j.action)",
    )
    arguments = "p_job text, p_worker text, p_ttls jsonb, p_own_transaction boolean"
    return StepFunction("reckon_claim", arguments, f"""
DECLARE
    j ledger_job%ROWTYPE;
    a ledger_attempt%ROWTYPE;
    before jsonb;
    now_ts timestamptz;
    token bigint;
BEGIN
    SELECT * INTO j FROM ledger_job WHERE job_id = p_job FOR UPDATE;
    IF NOT FOUND OR {_claim_refuses()} THEN
        RETURN;
    END IF;
    now_ts := clock_timestamp();
    token := j.lease_seq + 1;
    UPDATE ledger_attempt SET {_claim_sets(worker="p_worker", fence="token", now="now_ts", action="j.action")}
    WHERE id = {_latest_attempt("j.id")}
      AND execution_state = {_sql(was["execution_state"])}
    RETURNING * INTO a;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF p_own_transaction THEN
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    before := {snapshot_sql("j.status", **was)};
    UPDATE ledger_job SET {_claim_job_sets("token")}
    WHERE id = j.id;
    {claimed}
    RETURN NEXT a;
END """)  # nosec B608  # SQL generated from our own vocabulary (states.py), no input


# p_sent_to comes checked and cleaned by ledger.endpoints.recorded (the Python path's step).
def _begin() -> StepFunction:
    was = states_before(Execution.RUNNING, SideEffect.NOT_ATTEMPTED)
    started = _event_sql(
        actor="p_owner", kind=EventKind.SIDE_EFFECT_STARTED, job_status="j.status",
        evidence=_begun_evidence("j.idempotency_key"),
    )
    arguments = "p_job text, p_attempt bigint, p_owner text, p_token bigint, p_ttls jsonb, p_sent_to text"
    return StepFunction("reckon_begin", arguments, f"""
DECLARE
    j ledger_job%ROWTYPE;
    a ledger_attempt%ROWTYPE;
    before jsonb;
    now_ts timestamptz;
BEGIN
    SELECT * INTO j FROM ledger_job WHERE job_id = p_job FOR UPDATE;
    IF NOT FOUND OR {_begin_refuses()} THEN
        RETURN;
    END IF;
    now_ts := clock_timestamp();
    UPDATE ledger_attempt SET {_begin_sets(now="now_ts", sent_to="p_sent_to")}
    WHERE {_begin_holds(attempt="p_attempt", job="j.id", owner="p_owner", fence="p_token", now="now_ts",
                        identity="j.identity")}
    RETURNING * INTO a;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    before := {snapshot_sql("j.status", **was)};
    {started}
    RETURN NEXT a;
END """)  # nosec B608  # SQL generated from our own vocabulary (states.py), no input


def _begun_evidence(key: str) -> str:
    """sent_to only when the worker said where (as the Python path writes it)."""
    return f"jsonb_strip_nulls(jsonb_build_object('idempotency_key', {key}, 'sent_to', nullif(a.sent_to, '')))"


def _succeed() -> StepFunction:
    was = states_before(Execution.RUNNING, SideEffect.SUBMITTED)
    succeeded = _sql(JobStatus.SUCCEEDED)
    recorded = _event_sql(actor="p_owner", kind=EventKind.SUCCEEDED, job_status=succeeded,
                          evidence="p_evidence")
    arguments = (
        "p_job text, p_attempt bigint, p_owner text, p_token bigint, p_result_ref text, p_evidence jsonb"
    )
    return StepFunction("reckon_succeed", arguments, f"""
DECLARE
    j ledger_job%ROWTYPE;
    a ledger_attempt%ROWTYPE;
    before jsonb;
BEGIN
    SELECT * INTO j FROM ledger_job WHERE job_id = p_job FOR UPDATE;
    IF NOT FOUND OR {_succeed_refuses()} THEN
        RETURN;
    END IF;
    UPDATE ledger_attempt SET {_succeed_sets("p_result_ref")}
    WHERE {_succeed_holds(attempt="p_attempt", job="j.id", owner="p_owner", fence="p_token")}
    RETURNING * INTO a;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    before := {snapshot_sql("j.status", **was)};
    UPDATE ledger_job SET {_succeed_job_sets()} WHERE id = j.id;
    {recorded}
    RETURN NEXT a;
END """)  # nosec B608  # SQL generated from our own vocabulary (states.py), no input


# -- the same steps for N jobs: each step one statement per table, for the whole batch -------------
#
# A batch function takes every job's row lock first, in one statement (begin and results in job-id
# order, as every batch locks; a claim skips what others hold, so it never waits); then, in a new
# statement, which sees what each lock's previous holder wrote, it compare-and-sets every attempt,
# updates the jobs and inserts the events: one UPDATE or INSERT per table for the batch, where the
# one-job function runs each once per job. (Measured with perf on the one-job functions run per job:
# a quarter of PostgreSQL's time went to preparing each statement's CHECK constraints again, per job
# and table, and a tenth to starting each statement's executor.) Each job keeps its own attempt,
# fencing token, event and hash-chain link (the trigger, per row); a job a rule leaves to the Python
# path gets no row, and the caller takes it alone through its one-job step, as before.

RESULTS_BY_PLACE = "TABLE(place bigint, attempt ledger_attempt)"
SCOPED = ("(p_tenants IS NULL OR j.tenant = ANY(p_tenants)) "
          "AND (p_actions IS NULL OR j.action = ANY(p_actions))")


def _lock_leased_jobs() -> str:
    """The batch's jobs in scope, row-locked in id order (a lease's job named by its job_id)."""
    return f"""PERFORM FROM ledger_job j
    WHERE j.job_id IN (SELECT l ->> 'job' FROM jsonb_array_elements(p_leases) l) AND {SCOPED}
    ORDER BY j.id FOR UPDATE;"""  # nosec B608  # SQL generated from our own vocabulary, no input


def _leases(fields: str, columns: str, job_columns: str, refuses: str) -> str:
    """Each lease of p_leases (a JSON array) as a row of l: its place n, its job's id (`job`) and
    `job_columns`, its attempt (named, or the one leased with its token) and `fields`; only the
    leases whose job is in scope and the step's rules take. MATERIALIZED: the compare-and-set then
    finds each attempt by its primary key, whatever the planner guesses of the batch's size."""
    return f"""l AS MATERIALIZED (
        SELECT l.n, j.id AS job, {job_columns}, {columns},
               coalesce(l.attempt, (SELECT x.id FROM ledger_attempt x WHERE x.job_id = j.id AND x.lease_token = l.token))
                   AS attempt
        FROM ROWS FROM (jsonb_to_recordset(p_leases) AS (job text, attempt bigint, {fields}))
            WITH ORDINALITY AS l(job, attempt, {columns.replace("l.", "")}, n)
        JOIN ledger_job j ON j.job_id = l.job
        WHERE {SCOPED} AND NOT ({refuses})
    )"""  # nosec B608  # SQL generated from our own vocabulary, no input


def _events_sql(*, actor: str, kind: EventKind, job_status: str, before: str, evidence: str) -> str:
    """The batch's events, one per changed attempt (rows of `a`), in job-id order."""
    values = _event_values(actor=actor, kind=kind, job_status=job_status, evidence=evidence, job="a.job_id",
                           before=before)
    return (f"INSERT INTO ledger_ledgerevent ({EVENT_COLUMNS})\n"  # nosec B608  # SQL generated from our own vocabulary (states.py), no input
            f"        SELECT {values}\n"
            "        FROM a ORDER BY a.job_id")


# What a claim may take: a pending job not under recovery and not held by the dead-man gate. The
# scoped claim's partial indexes (ledger.models.Job) hold exactly these jobs, by tenant, by action and
# by both, oldest first.
CLAIMABLE = f"j.status = {_sql(JobStatus.PENDING)} AND NOT j.recovery_pending AND j.gated_at IS NULL"

# A scoped claim's candidates: the oldest claimable jobs of each of its keys (a tenant, an action, or
# a tenant and an action), each key read through its index, merged oldest first; none passed over.
SCOPE_KEYS = {
    "tenants": ("unnest(p_tenants) s(tenant)", "j.tenant = s.tenant"),
    "actions": ("unnest(p_actions) s(action)", "j.action = s.action"),
    "both": ("unnest(p_tenants) t(tenant) CROSS JOIN unnest(p_actions) s(action)",
             "j.tenant = t.tenant AND j.action = s.action"),
}


def _candidates(keys: str) -> str:
    source, match = SCOPE_KEYS[keys]
    wanted = "p_limit - cardinality(locked)"
    return f"""SELECT array_agg(c.id ORDER BY c.created_at, c.id) INTO candidates FROM (
                    SELECT c.id, c.created_at FROM {source} CROSS JOIN LATERAL (
                        SELECT j.id, j.created_at FROM ledger_job j
                        WHERE {match} AND {CLAIMABLE} AND j.id <> ALL(passed)
                        ORDER BY j.created_at, j.id LIMIT {wanted}
                    ) c
                    ORDER BY c.created_at, c.id LIMIT {wanted}
                ) c;"""  # nosec B608  # SQL generated from our own vocabulary, no input


# Up to p_limit of the oldest pending jobs in scope, locked with SKIP LOCKED (concurrent batches
# never pick the same job and never wait for each other), each claimed as reckon_claim claims it.
# A row whose attempt is NULL: a job locked but left to the Python path. Own transaction: as above.
#
# Unscoped, one statement walks the pending jobs oldest first, locking as it goes. A scoped claim
# must not walk other tenants' or actions' older jobs (measured: 17.6 ms a claim of 50 with no
# other backlog, 40.6 ms behind 40,000 of another tenant's), so it reads its candidates through the
# indexes of its keys, then locks them with SKIP LOCKED, and when others held some (a concurrent
# claim read the same candidates) reads the next ones past those, until it has p_limit or none is
# left. It locks only the jobs it claims: locking each key's first p_limit at once would lock up to
# (keys - 1) x p_limit jobs it then leaves, and over the API every claim names its actions.
def _claim_many() -> StepFunction:
    was = states_before(Execution.NOT_STARTED)
    running = _sql(JobStatus.RUNNING)
    claimed = _events_sql(
        actor="a.lease_owner", kind=EventKind.CLAIMED, job_status=running,
        before=snapshot_sql("a.job_status", **was),
        evidence="jsonb_build_object('fencing_token', a.lease_token, 'lease_ttl_s', p_ttls -> a.job_action)",
    )
    arguments = ("p_worker text, p_limit integer, p_ttls jsonb, p_tenants text[], p_actions text[], "
                 "p_own_transaction boolean")
    return StepFunction("reckon_claim_many", arguments, f"""
#variable_conflict use_column
DECLARE
    locked bigint[] := '{{}}';
    passed bigint[] := '{{}}';
    candidates bigint[];
BEGIN
    IF p_tenants IS NULL AND p_actions IS NULL THEN
        SELECT coalesce(array_agg(c.id), '{{}}') INTO locked FROM (
            SELECT j.id FROM ledger_job j WHERE {CLAIMABLE}
            ORDER BY j.created_at, j.id LIMIT p_limit
            FOR UPDATE SKIP LOCKED
        ) c;
    ELSE
        LOOP
            IF p_actions IS NULL THEN
                {_candidates("tenants")}
            ELSIF p_tenants IS NULL THEN
                {_candidates("actions")}
            ELSE
                {_candidates("both")}
            END IF;
            EXIT WHEN candidates IS NULL;
            locked := locked || ARRAY(
                SELECT j.id FROM ledger_job j WHERE j.id = ANY(candidates) AND {CLAIMABLE}
                ORDER BY j.id FOR UPDATE SKIP LOCKED);
            EXIT WHEN cardinality(locked) >= p_limit;
            passed := passed || candidates;
        END LOOP;
    END IF;
    IF cardinality(locked) = 0 THEN
        RETURN;
    END IF;
    IF p_own_transaction THEN
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    RETURN QUERY
    WITH c AS MATERIALIZED (
        SELECT j AS job, j.id AS jid, j.created_at, j.status, j.action, j.lease_seq + 1 AS token,
               clock_timestamp() AS now_ts, {_latest_attempt("j.id")} AS attempt,
               NOT ({_claim_refuses()}) AS claimable
        FROM ledger_job j WHERE j.id = ANY(locked)
    ), a AS (
        UPDATE ledger_attempt SET {_claim_sets(worker="p_worker", fence="c.token", now="c.now_ts", action="c.action")}
        FROM c
        WHERE c.claimable AND id = c.attempt
          AND execution_state = {_sql(was["execution_state"])}
        RETURNING ledger_attempt.*, ledger_attempt AS attempt_row, c.status AS job_status, c.action AS job_action
    ), u AS (
        UPDATE ledger_job j SET {_claim_job_sets("a.lease_token")}
        FROM a WHERE j.id = a.job_id
    ), e AS (
        {claimed}
    )
    SELECT c.job, a.attempt_row FROM c LEFT JOIN a ON a.job_id = c.jid
    ORDER BY c.created_at, c.jid;
END """, RESULT="TABLE(job ledger_job, attempt ledger_attempt)")  # nosec B608  # SQL generated from our own vocabulary (states.py), no input


def _begin_many() -> StepFunction:
    was = states_before(Execution.RUNNING, SideEffect.NOT_ATTEMPTED)
    started = _events_sql(
        actor="a.lease_owner", kind=EventKind.SIDE_EFFECT_STARTED, job_status="a.job_status",
        before=snapshot_sql("a.job_status", **was), evidence=_begun_evidence("a.job_idempotency_key"),
    )
    leases = _leases("owner text, token bigint, sent_to text", "l.owner, l.token, l.sent_to",
                     "j.status, j.identity, j.idempotency_key, clock_timestamp() AS now_ts", _begin_refuses())
    return StepFunction("reckon_begin_many", "p_leases jsonb, p_ttls jsonb, p_tenants text[], p_actions text[]", f"""
#variable_conflict use_column
BEGIN
    {_lock_leased_jobs()}
    RETURN QUERY
    WITH {leases}, a AS (
        UPDATE ledger_attempt SET {_begin_sets(now="l.now_ts", sent_to="l.sent_to")}
        FROM l
        WHERE {_begin_holds(attempt="l.attempt", job="l.job", owner="l.owner", fence="l.token", now="l.now_ts",
                            identity="l.identity")}
        RETURNING ledger_attempt.*, ledger_attempt AS attempt_row, l.n AS place, l.status AS job_status,
                  l.idempotency_key AS job_idempotency_key
    ), e AS (
        {started}
    )
    SELECT a.place, a.attempt_row FROM a ORDER BY a.place;
END """, RESULT=RESULTS_BY_PLACE)  # nosec B608  # SQL generated from our own vocabulary (states.py), no input


def _succeed_many() -> StepFunction:
    was = states_before(Execution.RUNNING, SideEffect.SUBMITTED)
    recorded = _events_sql(
        actor="a.lease_owner", kind=EventKind.SUCCEEDED, job_status=_sql(JobStatus.SUCCEEDED),
        before=snapshot_sql("a.job_status", **was), evidence="a.event_evidence",
    )
    leases = _leases("owner text, token bigint, result_ref text, evidence jsonb",
                     "l.owner, l.token, l.result_ref, l.evidence", "j.status", _succeed_refuses())
    return StepFunction("reckon_succeed_many", "p_leases jsonb, p_tenants text[], p_actions text[]", f"""
#variable_conflict use_column
BEGIN
    {_lock_leased_jobs()}
    RETURN QUERY
    WITH {leases}, a AS (
        UPDATE ledger_attempt SET {_succeed_sets("l.result_ref")}
        FROM l
        WHERE {_succeed_holds(attempt="l.attempt", job="l.job", owner="l.owner", fence="l.token")}
        RETURNING ledger_attempt.*, ledger_attempt AS attempt_row, l.n AS place, l.status AS job_status,
                  coalesce(l.evidence, '{{}}'::jsonb) AS event_evidence
    ), u AS (
        UPDATE ledger_job j SET {_succeed_job_sets()}
        FROM a WHERE j.id = a.job_id
    ), e AS (
        {recorded}
    )
    SELECT a.place, a.attempt_row FROM a ORDER BY a.place;
END """, RESULT=RESULTS_BY_PLACE)  # nosec B608  # SQL generated from our own vocabulary (states.py), no input


def _literal(field, value) -> str:
    """A model field's Python default as an SQL literal of the field's column."""
    if hasattr(value, "value"):
        value = value.value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, (dict, list)):
        return _sql(json.dumps(value)) + "::jsonb"
    return _sql(value)


def insert_values(model, given: dict[str, str]) -> tuple[str, str]:
    """The column list and VALUES of a new row of `model`: `given` (column -> SQL) where it says,
    each other field's default as the model declares it (Python default, db_default, or NULL)."""
    columns, values = [], []
    for field in model._meta.concrete_fields:
        if field.primary_key:
            continue
        if field.column in given:
            value = given[field.column]
        elif field.has_default():
            value = _literal(field, field.get_default())
        elif field.has_db_default():
            value = "now()"  # created_at, updated_at: Now(), as Django inserts them
            if not isinstance(field, models.DateTimeField):
                raise TypeError(f"{model.__name__}.{field.name}: a db_default the fast path cannot write")
        elif field.null:
            value = "NULL"
        else:
            raise TypeError(f"{model.__name__}.{field.name} has no default: the fast path must be given it")
        columns.append(field.column)
        values.append(value)
    return ", ".join(columns), ", ".join(values)


# A job enqueued by a caller that claims it itself at once (the MCP gateway: no worker is handed
# it): the job, its first attempt and the `enqueued` event, as enqueue_job writes them with
# dispatch=False. An id (or key) already taken changes nothing (no row): enqueue_job then compares.
# An archived one is the job table's to refuse (its trigger, ledger.tombstones), as on every path.
def _enqueue() -> StepFunction:
    job_columns, job_values = insert_values(Job, {
        "job_id": "p_job", "tenant": "p_tenant", "action": "p_action", "payload": "p_payload",
        "identity": "p_identity", "policy": "p_policy", "idempotency_key": "p_key",
    })
    attempt_columns, attempt_values = insert_values(Attempt, {"job_id": "j.id", "number": "1"})
    enqueued = (
        "INSERT INTO ledger_ledgerevent (job_id, attempt_id, actor_type, actor, kind, \"before\", \"after\", "  # nosec B608  # SQL generated from our own vocabulary (states.py), no input
        f"note, evidence, prev_hash, hash) VALUES (j.id, a.id, p_actor_type, "
        f"left(p_actor, {_max_length(LedgerEvent, 'actor')}), {_sql(EventKind.ENQUEUED)}, '{{}}'::jsonb, "
        f"{snapshot_sql('j.status')}, '', '{{}}'::jsonb, '', '');"
    )
    arguments = ("p_job text, p_tenant text, p_action text, p_payload jsonb, p_identity jsonb, p_policy jsonb, "
                 "p_key text, p_actor text, p_actor_type text")
    return StepFunction("reckon_enqueue", arguments, f"""
DECLARE
    j ledger_job%ROWTYPE;
    a ledger_attempt%ROWTYPE;
BEGIN
    INSERT INTO ledger_job ({job_columns}) VALUES ({job_values})
    ON CONFLICT DO NOTHING
    RETURNING * INTO j;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    INSERT INTO ledger_attempt ({attempt_columns}) VALUES ({attempt_values})
    RETURNING * INTO a;
    {enqueued}
    RETURN NEXT a;
END """)  # nosec B608  # SQL generated from our own vocabulary (states.py), no input


# -- calling them: one statement per step ----------------------------------------------------------
#
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


@dataclass(frozen=True)
class Scope:
    """Tenants and actions a caller may act for; None: all."""

    tenants: Collection[str] | None = None
    actions: Collection[str] | None = None

    def covers(self, *, tenant: str, action: str) -> bool:
        return ((self.tenants is None or tenant in self.tenants)
                and (self.actions is None or action in self.actions))

    def params(self) -> dict:
        return {"tenants": None if self.tenants is None else list(self.tenants),
                "actions": None if self.actions is None else list(self.actions)}


EVERYTHING = Scope()


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
