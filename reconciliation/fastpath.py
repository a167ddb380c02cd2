"""Reconciliation's common outcomes applied by one database function per batch of findings.

A pass's lookups run in threads; what they find is applied on the pass's one thread
(`reconciliation.applying.apply_looks`, the one door). Through the Python transition layer each
finding costs that thread its share of locking and reading the jobs, building the objects and
the rows; with dozens of lookups in flight, that thread became the pass's ceiling. So the three
outcomes nearly every finding has — **confirmed**, **not found** with a replay, **unavailable**
with a back-off — are applied by `reckon_reconcile_apply`, one call per batch, in the caller's
transaction. It does what `applying._apply_look` and `reconciliation.resolution` do for each
case, set-based as `Batch.flush` writes (one statement per kind of write for the whole batch): it
locks the jobs (in primary-key order, as `lock_jobs`), judges each finding under the locks, writes
the ReconciliationChecks, closes the attempts, opens the replays' attempts, updates the jobs and
inserts the events in the findings' order (the `reckon_hash_chain` trigger links them), with the
same kinds, notes, evidence and before/after snapshots.

What Python decides stays in Python, before the call: which findings are common (`prepare`: an
irreversible action's replay needs an approval, an exhausted job fails, the last allowed look
hands over to a person, a job under recovery is a probe), the notes, the evidence and the
back-off's jittered delay. The function checks under the lock that the job is as it was looked
up (same attempt, same version, still waiting): a stale finding is recorded as a check and
changes nothing, for that job alone (`superseded`). A job that is as it was but not quite as
`prepare` assumed (its check count moved, or someone holds a job the finding would finish) is
left untouched (`declined`) for the Python path, in the same transaction.

The function text is generated here from ledger/states.py and the models (and ledger.stepsql's
snapshot); migrations freeze it (reconciliation 0006 first) and never import this module:
tests/reconciliation/test_fast_apply.py fails when the two differ.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from django.conf import settings
from django.db import connection

from ledger.actions import policy_of
from ledger.models import Attempt, LedgerEvent
from ledger.states import EventKind, Execution, JobStatus, SideEffect
from ledger.stepsql import max_length, snapshot_sql, sql_literal
from reconciliation.models import CheckOutcome, ReconciliationCheck

COMMON = (CheckOutcome.CONFIRMED, CheckOutcome.NOT_FOUND, CheckOutcome.UNAVAILABLE)

# What each finding carries into the function (jsonb_to_recordset's column definitions).
FINDING_COLUMNS = (
    ("job", "text"), ("attempt", "bigint"), ("version", "integer"), ("outcome", "text"),
    ("check_count", "integer"), ("new_count", "integer"), ("delay", "float8"),
    ("actor", "text"), ("actor_type", "text"), ("note", "text"), ("evidence", "jsonb"), ("result_ref", "text"),
    ("replay_note", "text"),
    ("reconciler", "text"), ("asked", "text"), ("check_evidence", "jsonb"), ("error", "text"),
    ("duration_ms", "integer"),
)

SUPERSEDED, DECLINED = "superseded", "declined"

# Off: every finding takes the Python path (the bench measures both in one run; bench/drain.py).
ENABLED = True


@dataclass(frozen=True)
class ApplyFunction:
    name: str
    arguments: str  # as pg_get_function_arguments() renders them
    result: str  # as pg_get_function_result() renders it
    body: str  # the text between the $$ quotes (pg_proc.prosrc)

    LANGUAGE = "plpgsql"

    @property
    def create_sql(self) -> str:
        return (
            f"\nCREATE OR REPLACE FUNCTION {self.name}({self.arguments})\n"
            f"RETURNS {self.result} LANGUAGE {self.LANGUAGE} AS $${self.body}$$;\n"
        )

    @property
    def drop_sql(self) -> str:
        return f"DROP FUNCTION IF EXISTS {self.name}(jsonb)"


def _new_attempt_columns() -> tuple[list[str], list[str]]:
    """The replay's attempt's columns and values beyond job and number: the model's defaults, as
    `Attempt(job=, number=)` has them (columns with a database default are left to it, as the
    Python path's insert leaves them)."""
    fresh = Attempt(number=1)
    columns, values = [], []
    for field in Attempt._meta.concrete_fields:
        if field.primary_key or field.has_db_default() or field.name in ("job", "number"):
            continue
        value = getattr(fresh, field.attname)
        if value is not None:
            columns.append(field.column)
            values.append(str(value) if isinstance(value, int) else sql_literal(value))
    return columns, values


def _iso(moment: str) -> str:
    """A timestamptz as Python's datetime.isoformat() writes it in UTC (no fraction when it is zero)."""
    return (f"to_char({moment} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS') || "
            f"CASE WHEN extract(microseconds FROM {moment})::bigint % 1000000 = 0 THEN '' "
            f"ELSE to_char({moment} AT TIME ZONE 'UTC', '.US') END || '+00:00'")


# What the first statement decides for each finding (with the finding), kept in a jsonb variable
# for the next statements.
VERDICT_COLUMNS = (*FINDING_COLUMNS, ("position", "bigint"), ("verdict", "text"), ("job_pk", "bigint"),
                   ("number", "integer"), ("before", "jsonb"), ("idempotency_key", "text"))


def apply_function() -> ApplyFunction:
    """Set-based: one statement per kind of write for the whole batch (as `Batch.flush` writes),
    in the order the constraints need (the old attempt closed before the replay's opens)."""
    waiting, unknown = sql_literal(JobStatus.NEEDS_RECONCILIATION), sql_literal(Execution.UNKNOWN)
    succeeded, pending = sql_literal(JobStatus.SUCCEEDED), sql_literal(JobStatus.PENDING)
    confirmed, not_found = sql_literal(CheckOutcome.CONFIRMED), sql_literal(CheckOutcome.NOT_FOUND)
    unavailable = sql_literal(CheckOutcome.UNAVAILABLE)
    columns = ", ".join(f"{name} {kind}" for name, kind in FINDING_COLUMNS)
    names = ", ".join(name for name, _ in FINDING_COLUMNS)
    findings = (f"ROWS FROM (jsonb_to_recordset(p_findings) AS ({columns})) "
                f"WITH ORDINALITY AS f({names}, position)")
    verdicts = f"jsonb_to_recordset(v) AS x({', '.join(f'{name} {kind}' for name, kind in VERDICT_COLUMNS)})"
    applied = f"x.verdict IN ({confirmed}, {not_found}, {unavailable})"
    new_columns, new_values = _new_attempt_columns()
    event_columns = ('job_id, attempt_id, "at", actor_type, actor, kind, "before", "after", note, evidence, '
                     'prev_hash, hash')
    actor = f"left(x.actor, {max_length(LedgerEvent, 'actor')})"
    body = f"""
DECLARE
    v jsonb;
BEGIN
    PERFORM 1 FROM ledger_job
    WHERE job_id IN (SELECT x ->> 'job' FROM jsonb_array_elements(p_findings) x) ORDER BY id FOR UPDATE;
    -- Under the locks, in a new statement (it sees what the locks' previous holders wrote): each
    -- finding's verdict. Stale: superseded. Not as prepare() assumed, or the job's second finding
    -- in this batch: declined (the Python path judges it after this call, seeing what it wrote).
    SELECT coalesce(jsonb_agg(to_jsonb(s) ORDER BY s.position), '[]') INTO v
    FROM (
        SELECT f.*, j.id AS job_pk, a.number, j.idempotency_key, {snapshot_sql("j.status")} AS before,
            CASE WHEN j.id IS NULL OR row_number() OVER (PARTITION BY f.job ORDER BY f.position) > 1
                     THEN {sql_literal(DECLINED)}
                 WHEN a.id IS DISTINCT FROM f.attempt OR a.version <> f.version
                      OR j.status <> {waiting} OR a.execution_state <> {unknown} THEN {sql_literal(SUPERSEDED)}
                 WHEN j.check_count <> f.check_count OR (f.outcome = {confirmed} AND j.holder <> '')
                     THEN {sql_literal(DECLINED)}
                 ELSE f.outcome END AS verdict
        FROM {findings}
        LEFT JOIN ledger_job j ON j.job_id = f.job
        LEFT JOIN LATERAL (SELECT * FROM ledger_attempt WHERE job_id = j.id ORDER BY number DESC LIMIT 1) a ON true
    ) s;

    INSERT INTO reconciliation_reconciliationcheck (job_id, attempt_id, reconciler, asked, outcome, evidence,
        error, duration_ms)
    SELECT x.job_pk, x.attempt, left(x.reconciler, {max_length(ReconciliationCheck, 'reconciler')}),
        left(x.asked, {max_length(ReconciliationCheck, 'asked')}), x.outcome, x.check_evidence, x.error, x.duration_ms
    FROM {verdicts} WHERE x.verdict <> {sql_literal(DECLINED)} ORDER BY x.position;

    UPDATE ledger_attempt a SET version = a.version + 1, updated_at = statement_timestamp(),
        execution_state = CASE WHEN x.verdict = {confirmed} THEN {sql_literal(Execution.SUCCEEDED)}
                               ELSE {sql_literal(Execution.FAILED)} END,
        side_effect_state = CASE WHEN x.verdict = {confirmed} THEN {sql_literal(SideEffect.CONFIRMED)}
                                 WHEN a.side_effect_state = {sql_literal(SideEffect.AMBIGUOUS)} THEN {sql_literal(SideEffect.NOT_FOUND)}
                                 ELSE {sql_literal(SideEffect.NOT_ATTEMPTED)} END,
        result_ref = CASE WHEN x.verdict = {confirmed} THEN left(x.result_ref, {max_length(Attempt, 'result_ref')})
                          ELSE a.result_ref END
    FROM {verdicts} WHERE a.id = x.attempt AND x.verdict IN ({confirmed}, {not_found});

    INSERT INTO ledger_attempt (job_id, number, {", ".join(new_columns)})
    SELECT x.job_pk, x.number + 1, {", ".join(new_values)}
    FROM {verdicts} WHERE x.verdict = {not_found} ORDER BY x.position;

    UPDATE ledger_job j SET
        status = CASE x.verdict WHEN {confirmed} THEN {succeeded} WHEN {not_found} THEN {pending} ELSE j.status END,
        check_count = CASE WHEN x.verdict = {unavailable} THEN x.new_count ELSE 0 END,
        next_check_at = CASE WHEN x.verdict = {unavailable} THEN clock_timestamp() + x.delay * interval '1 second' END,
        recovery_pending = CASE WHEN x.verdict = {unavailable} THEN j.recovery_pending ELSE false END,
        updated_at = CASE WHEN x.verdict = {unavailable} THEN j.updated_at ELSE statement_timestamp() END
    FROM {verdicts} WHERE j.id = x.job_pk AND {applied};

    -- The events, in the findings' order (the reckon_hash_chain trigger links each to its job's last),
    -- stamped when written, after the jobs' locks (the column's default is the statement's start, and
    -- this whole call is one statement: it may have waited on a lock a worker's step held).
    INSERT INTO ledger_ledgerevent ({event_columns})
    SELECT e.job_pk, e.attempt_id, clock_timestamp(), e.actor_type, e.actor, e.kind, e.before, e.after, e.note, e.evidence, '', ''
    FROM (
        SELECT x.position, 1 AS seq, x.job_pk, a.id AS attempt_id, x.actor_type, {actor} AS actor,
            CASE x.verdict WHEN {confirmed} THEN {sql_literal(EventKind.RECONCILED_CONFIRMED)}
                           WHEN {not_found} THEN {sql_literal(EventKind.RECONCILED_NOT_FOUND)}
                           ELSE {sql_literal(EventKind.RECONCILIATION_UNAVAILABLE)} END AS kind,
            x.before,
            CASE x.verdict WHEN {confirmed} THEN {snapshot_sql(succeeded)}
                           WHEN {not_found} THEN {snapshot_sql(waiting)} ELSE x.before END AS after,
            x.note,
            CASE WHEN x.verdict = {unavailable}
                 THEN x.evidence || jsonb_build_object('next_check_at', {_iso("j.next_check_at")})
                 ELSE x.evidence END AS evidence
        FROM {verdicts} JOIN ledger_attempt a ON a.id = x.attempt JOIN ledger_job j ON j.id = x.job_pk
        WHERE {applied}
        UNION ALL
        SELECT x.position, 2, x.job_pk, a.id, x.actor_type, {actor}, {sql_literal(EventKind.ATTEMPT_OPENED)},
            jsonb_build_object('job', {waiting}), {snapshot_sql(pending)}, x.replay_note,
            jsonb_build_object('idempotency_key', x.idempotency_key, 'previous_attempt', x.number)
        FROM {verdicts} JOIN ledger_attempt a ON a.job_id = x.job_pk AND a.number = x.number + 1
        WHERE x.verdict = {not_found}
    ) e ORDER BY e.position, e.seq;

    RETURN QUERY SELECT x.position, CASE x.verdict WHEN {confirmed} THEN {succeeded} WHEN {not_found} THEN 'replayed'
                                                   WHEN {unavailable} THEN 'backed_off' ELSE x.verdict END
    FROM {verdicts};
END """  # nosec B608  # SQL generated from our own vocabulary (states.py) and models, no input
    return ApplyFunction("reckon_reconcile_apply", "p_findings jsonb",
                         "TABLE(r_position bigint, r_applied text)", body)


# -- calling it --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Prepared:
    """A common finding, ready for the function: its row, and what its Decision says once applied."""

    row: dict
    applied: str  # the Decision's `applied` when the function applies it
    note: str  # the Decision's note


def prepare(look, by, *, backoff_seconds, jitter) -> Prepared | None:
    """The function's row for a look whose finding is one of the common outcomes, judged on the
    job and attempt as they were looked up; None: the Python path applies it."""
    finding, job, attempt = look.finding, look.job, look.attempt
    if (not ENABLED or finding is None or finding.outcome not in COMMON or job.status != JobStatus.NEEDS_RECONCILIATION
            or attempt.execution_state != Execution.UNKNOWN):
        return None
    evidence = {**finding.evidence, "reconciler": look.reconciler, "reason": finding.reason,
                **({"asked": finding.asked} if finding.asked else {})}
    row = {
        "job": job.job_id, "attempt": attempt.pk, "version": attempt.version, "outcome": finding.outcome,
        "check_count": job.check_count, "new_count": job.check_count, "delay": 0.0,
        **by.fields, "note": finding.reason, "evidence": evidence, "result_ref": finding.result_ref,
        "replay_note": "",
        "reconciler": look.reconciler, "asked": finding.asked, "check_evidence": {**finding.evidence, "reason": finding.reason},
        "error": finding.reason if finding.outcome == CheckOutcome.UNAVAILABLE else "",
        "duration_ms": look.duration_ms,
    }
    if finding.outcome == CheckOutcome.CONFIRMED:
        return Prepared(row, "succeeded", finding.result_ref)
    if finding.outcome == CheckOutcome.NOT_FOUND:
        policy = policy_of(job)
        if not policy.reversible or attempt.number >= policy.max_attempts:
            return None  # an approval, or the job fails: Python's
        row["replay_note"] = f"replay with the same key: {finding.reason}"
        return Prepared(row, "replayed", finding.reason)
    if finding.retry_in is not None:  # not really asked: not counted
        delay = finding.retry_in * jitter()
        row.update(delay=delay, note=f"{finding.reason}; not counted as a look; next look in {delay:.1f} s",
                   evidence={**evidence, "check_count": job.check_count, "not_counted": True})
        return Prepared(row, f"not asked, again in {delay:.1f} s", finding.reason)
    count = job.check_count + 1
    if count >= settings.RECKON_RECONCILE_MAX_CHECKS:
        return None  # the last look: a person decides (Python's)
    delay = backoff_seconds(count)
    row.update(delay=delay, new_count=count, note=f"{finding.reason}; next look in {delay:.1f} s",
               evidence={**evidence, "check_count": count})
    return Prepared(row, f"retry in {delay:.1f} s", finding.reason)


def lock(job_ids: list[str]) -> None:
    """Lock the jobs in primary-key order (as the function and `lock_jobs` do), reading nothing."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM ledger_job WHERE job_id = ANY(%s) ORDER BY id FOR UPDATE", [job_ids])


def apply(rows: list[dict]) -> list[str]:
    """reckon_reconcile_apply on the rows (in the caller's transaction): what it did with each,
    in order — succeeded, replayed, backed_off, superseded, or declined (left to Python)."""
    if not rows:
        return []
    with connection.cursor() as cursor:
        cursor.execute("SELECT r_position, r_applied FROM reckon_reconcile_apply(%s::jsonb)", [json.dumps(rows)])
        done = dict(cursor.fetchall())
    return [done[position] for position in range(1, len(rows) + 1)]
