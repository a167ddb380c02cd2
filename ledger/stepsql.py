"""The worker loop's ordinary steps as database functions, generated from ledger/states.py: the
text the migrations install (ledger/fastpath.py calls them).

claim -> begin side effect -> record success is the ledger's hot path. Each function does what
the Python transition (ledger.services.worker) does for the ordinary case, in one round trip:
lock the job row; then, in a new statement so it sees what the lock's previous holder wrote,
compare-and-set the attempt on every condition the Python path checks; update the job; insert
the event; all in the caller's transaction. It returns the changed attempt row. In any other
case it changes nothing and returns no row, and the Python path decides and records.

Every state, event kind and actor below comes from ledger.states, and the events' before/after
snapshots from ledger.snapshots.snapshot itself (what the Python transitions record), so the
functions cannot drift from the rules. Migrations freeze the text they install (0005 first) and
never import this module: when its output changes, tests/ledger/test_fast_path.py fails and names
the migration to write. This module imports nothing of ledger.services: it is a floor below them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from django.db import models

from ledger.models import Attempt, Job, LedgerEvent
from ledger.snapshots import snapshot
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


def sql_literal(value) -> str:
    """A state, kind or other value as an SQL string literal."""
    text = str(value.value if hasattr(value, "value") else value)
    return "'" + text.replace("'", "''") + "'"


def _sql_list(values) -> str:
    return ", ".join(sql_literal(value) for value in values)


def max_length(model, field: str) -> int:
    return model._meta.get_field(field).max_length


class _Column(str):
    """SQL standing in for a model field's value, so that snapshot() can be read as SQL."""


def snapshot_sql(job_status: str, **pinned) -> str:
    """snapshot(job, attempt) as a jsonb expression over the attempt row `a`.

    snapshot() itself runs, on a job whose status is the SQL `job_status` and an attempt whose
    every field holds its column: the keys, their order and what each reads come from it.
    `pinned` gives attempt fields whose value is known, written as literals (the state before
    a compare-and-set, which the updated row no longer shows).
    """
    job = Job(status=_Column(job_status))
    attempt = Attempt(**{f.attname: _Column(f"a.{f.column}") for f in Attempt._meta.concrete_fields})
    known = {f"a.{Attempt._meta.get_field(name).column}": sql_literal(value) for name, value in pinned.items()}
    pairs = []
    for key, value in snapshot(job, attempt).items():
        if not isinstance(value, _Column):
            raise TypeError(f"snapshot()[{key!r}] is computed in Python, not read from a column: "
                            "the fast path cannot write it")
        pairs.append(f"{sql_literal(key)}, {known.get(value, value)}")
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
    return (f"{job}, a.id, clock_timestamp(), {sql_literal(ActorType.WORKER)}, "
            f"left({actor}, {max_length(LedgerEvent, 'actor')}), {sql_literal(kind)}, {before}, "
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
        delivery_state = {sql_literal(Delivery.LEASED)}, execution_state = {sql_literal(Execution.RUNNING)},
        lease_owner = {worker}, lease_token = {fence},
        lease_expires_at = {now} + (p_ttls ->> {action})::float8 * interval '1 second', heartbeat_at = {now}"""


def _latest_attempt(job: str) -> str:
    return f"(SELECT id FROM ledger_attempt WHERE job_id = {job} ORDER BY number DESC LIMIT 1)"  # nosec B608  # SQL generated here, no input


def _claim_job_sets(fence: str) -> str:
    return f"status = {sql_literal(JobStatus.RUNNING)}, updated_at = statement_timestamp(), lease_seq = {fence}"


def _begin_refuses() -> str:
    return f"j.recovery_pending OR NOT p_ttls ? j.action OR {ENQUEUED_IRREVERSIBLE}"


def _begin_sets(*, now: str, sent_to: str) -> str:
    return f"""version = version + 1, updated_at = statement_timestamp(),
        side_effect_state = {sql_literal(SideEffect.SUBMITTED)}, heartbeat_at = {now}, sent_to = {sent_to}"""


# The lease must be this attempt's current, unexpired one; identity verified when the job has one.
def _begin_holds(*, attempt: str, job: str, owner: str, fence: str, now: str, identity: str) -> str:
    was = states_before(Execution.RUNNING, SideEffect.NOT_ATTEMPTED)
    return f"""id = {attempt} AND job_id = {job}
      AND execution_state = {sql_literal(was["execution_state"])} AND lease_owner = {owner}
      AND lease_token = {fence} AND lease_expires_at > {now}
      AND side_effect_state = {sql_literal(was["side_effect_state"])}
      AND ({identity} IS NULL OR {identity} = '{{}}'::jsonb OR observed_identity IS NOT NULL)"""


# A result may arrive after the lease expired, as long as no one else has taken the attempt.
# A job someone holds ("I'm on it") takes the Python path, which releases the hold as it finishes.
def _succeed_refuses() -> str:
    return "j.holder <> ''"


def _succeed_sets(result_ref: str) -> str:
    return f"""version = version + 1, updated_at = statement_timestamp(),
        delivery_state = {sql_literal(Delivery.ACKNOWLEDGED)}, execution_state = {sql_literal(Execution.SUCCEEDED)},
        side_effect_state = {sql_literal(SideEffect.CONFIRMED)},
        result_ref = left({result_ref}, {max_length(Attempt, 'result_ref')})"""


def _succeed_holds(*, attempt: str, job: str, owner: str, fence: str) -> str:
    was = states_before(Execution.RUNNING, SideEffect.SUBMITTED)
    return f"""id = {attempt} AND job_id = {job}
      AND execution_state = {sql_literal(was["execution_state"])} AND lease_owner = {owner}
      AND lease_token = {fence} AND side_effect_state = {sql_literal(was["side_effect_state"])}"""


def _succeed_job_sets() -> str:
    return f"status = {sql_literal(JobStatus.SUCCEEDED)}, updated_at = statement_timestamp()"


# A claim need not be durable when it is its own transaction (p_own_transaction): if a crash
# loses it, the worker's next step (a compare-and-set on owner and token) is refused, and that
# step's synchronous commit flushes the WAL up to and including the claim. So the claim commits
# without waiting for the WAL flush; begin side effect and every result still wait for it.
def _claim() -> StepFunction:
    was = states_before(Execution.NOT_STARTED)
    running = sql_literal(JobStatus.RUNNING)
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
      AND execution_state = {sql_literal(was["execution_state"])}
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
    succeeded = sql_literal(JobStatus.SUCCEEDED)
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
CLAIMABLE = f"j.status = {sql_literal(JobStatus.PENDING)} AND NOT j.recovery_pending AND j.gated_at IS NULL"

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
    running = sql_literal(JobStatus.RUNNING)
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
          AND execution_state = {sql_literal(was["execution_state"])}
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
        actor="a.lease_owner", kind=EventKind.SUCCEEDED, job_status=sql_literal(JobStatus.SUCCEEDED),
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
        return sql_literal(json.dumps(value)) + "::jsonb"
    return sql_literal(value)


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
        f"left(p_actor, {max_length(LedgerEvent, 'actor')}), {sql_literal(EventKind.ENQUEUED)}, '{{}}'::jsonb, "
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
