"""Reconciliation's common outcomes applied by one database function per batch of findings.

A pass's lookups run in threads; what they find is applied on the pass's one thread
(`reconciliation.applying.apply_looks`, the one door). Through the Python transition layer each
finding costs that thread its share of locking and reading the jobs, building the objects and
the rows; with dozens of lookups in flight, that thread became the pass's ceiling. So the three
outcomes nearly every finding has — **confirmed**, **not found** with a replay, **unavailable**
with a back-off — are applied by `reckon_reconcile_apply`, one call per batch, in the caller's
transaction. For each finding, in order, it does what `applying._apply_look` and
`reconciliation.resolution` do for that case: lock the jobs (in primary-key order, as
`lock_jobs`), write the ReconciliationCheck, compare-and-set the attempt, update the job, open the
replay's attempt, and insert the events (the `reckon_hash_chain` trigger links them), with the
same kinds, notes, evidence and before/after snapshots.

What Python decides stays in Python, before the call: which findings are common (`prepare`: an
irreversible action's replay needs an approval, an exhausted job fails, the last allowed look
hands over to a person, a job under recovery is a probe), the notes, the evidence and the
back-off's jittered delay. The function checks under the lock that the job is as it was looked
up (same attempt, same version, still waiting): a stale finding is recorded as a check and
changes nothing, for that job alone (`superseded`). A job that is as it was but not quite as
`prepare` assumed (its check count moved, or someone holds a job the finding would finish) is
left untouched (`declined`) for the Python path, in the same transaction.

The function text is generated here from ledger/states.py and the models (and ledger.fastpath's
snapshot); migrations freeze it (reconciliation 0006 first) and never import this module:
tests/reconciliation/test_fast_apply.py fails when the two differ.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from django.conf import settings
from django.db import connection

from ledger.actions import policy_of
from ledger.fastpath import _max_length, _sql, snapshot_sql
from ledger.models import Attempt, LedgerEvent
from ledger.states import EventKind, Execution, JobStatus, SideEffect
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


def _event(kind, *, attempt: str, before: str, after: str, note: str, evidence: str) -> str:
    """The event row; the reckon_hash_chain trigger fills in its hashes."""
    return (
        "INSERT INTO ledger_ledgerevent (job_id, attempt_id, actor_type, actor, kind, \"before\", \"after\", "  # nosec B608  # SQL generated from our own vocabulary (states.py), no input
        f"note, evidence, prev_hash, hash) VALUES (j.id, {attempt}, f.actor_type, "
        f"left(f.actor, {_max_length(LedgerEvent, 'actor')}), {_sql(kind)}, {before}, {after}, "
        f"{note}, {evidence}, '', '');"
    )


def _new_attempt_sql() -> str:
    """INSERT of the replay's attempt, with the model's defaults as `Attempt(job=, number=)` has them
    (the columns with a database default are left to it, as the Python path's insert does)."""
    fresh = Attempt(number=1)
    columns, values = ["job_id", "number"], ["j.id", "prev_number + 1"]
    for field in Attempt._meta.concrete_fields:
        if field.primary_key or field.has_db_default() or field.name in ("job", "number"):
            continue
        value = getattr(fresh, field.attname)
        if value is None:
            continue
        columns.append(field.column)
        values.append(str(value) if isinstance(value, int) else _sql(value))
    return (f"INSERT INTO ledger_attempt ({', '.join(columns)}) VALUES ({', '.join(values)}) "  # nosec B608  # generated from the model's own defaults
            "RETURNING * INTO a;")


def _iso(moment: str) -> str:
    """A timestamptz as Python's datetime.isoformat() writes it in UTC (no fraction when it is zero)."""
    return (f"to_char({moment} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS') || "
            f"CASE WHEN extract(microseconds FROM {moment})::bigint % 1000000 = 0 THEN '' "
            f"ELSE to_char({moment} AT TIME ZONE 'UTC', '.US') END || '+00:00'")


def apply_function() -> ApplyFunction:
    waiting, unknown = _sql(JobStatus.NEEDS_RECONCILIATION), _sql(Execution.UNKNOWN)
    succeeded, pending = _sql(JobStatus.SUCCEEDED), _sql(JobStatus.PENDING)
    columns = ", ".join(f"{name} {kind}" for name, kind in FINDING_COLUMNS)
    names = ", ".join(name for name, _ in FINDING_COLUMNS)
    check = (
        "INSERT INTO reconciliation_reconciliationcheck (job_id, attempt_id, reconciler, asked, outcome, "  # nosec B608  # generated, no input
        f"evidence, error, duration_ms) VALUES (j.id, f.attempt, left(f.reconciler, "
        f"{_max_length(ReconciliationCheck, 'reconciler')}), left(f.asked, {_max_length(ReconciliationCheck, 'asked')}), "
        "f.outcome, f.check_evidence, f.error, f.duration_ms);"
    )
    after_now = snapshot_sql("j.status")
    confirmed = _event(EventKind.RECONCILED_CONFIRMED, attempt="a.id", before="before",
                       after=snapshot_sql(succeeded), note="f.note", evidence="f.evidence")
    not_found = _event(EventKind.RECONCILED_NOT_FOUND, attempt="a.id", before="before",
                       after=after_now, note="f.note", evidence="f.evidence")
    opened = _event(EventKind.ATTEMPT_OPENED, attempt="a.id", before=f"jsonb_build_object('job', {waiting})",
                    after=snapshot_sql(pending), note="f.replay_note",
                    evidence="jsonb_build_object('idempotency_key', j.idempotency_key, 'previous_attempt', prev_number)")
    unavailable = _event(EventKind.RECONCILIATION_UNAVAILABLE, attempt="a.id", before="before", after="before",
                         note="f.note", evidence=f"f.evidence || jsonb_build_object('next_check_at', {_iso('next_at')})")
    body = f"""
DECLARE
    f record;
    j ledger_job%ROWTYPE;
    a ledger_attempt%ROWTYPE;
    before jsonb;
    next_at timestamptz;
    prev_number integer;
BEGIN
    PERFORM 1 FROM ledger_job
    WHERE job_id IN (SELECT x ->> 'job' FROM jsonb_array_elements(p_findings) x) ORDER BY id FOR UPDATE;
    FOR f IN SELECT * FROM ROWS FROM (jsonb_to_recordset(p_findings) AS ({columns}))
             WITH ORDINALITY AS v({names}, position) ORDER BY v.position LOOP
        r_position := f.position;
        SELECT * INTO j FROM ledger_job WHERE job_id = f.job;
        IF NOT FOUND THEN
            r_applied := {_sql(DECLINED)};
            RETURN NEXT;
            CONTINUE;
        END IF;
        SELECT * INTO a FROM ledger_attempt WHERE job_id = j.id ORDER BY number DESC LIMIT 1;
        IF a.id IS DISTINCT FROM f.attempt OR a.version <> f.version
           OR j.status <> {waiting} OR a.execution_state <> {unknown} THEN
            {check}
            r_applied := {_sql(SUPERSEDED)};
            RETURN NEXT;
            CONTINUE;
        END IF;
        IF j.check_count <> f.check_count OR (f.outcome = {_sql(CheckOutcome.CONFIRMED)} AND j.holder <> '') THEN
            r_applied := {_sql(DECLINED)};
            RETURN NEXT;
            CONTINUE;
        END IF;
        {check}
        before := {snapshot_sql("j.status")};
        IF f.outcome = {_sql(CheckOutcome.CONFIRMED)} THEN
            UPDATE ledger_attempt SET version = version + 1, updated_at = statement_timestamp(),
                execution_state = {_sql(Execution.SUCCEEDED)}, side_effect_state = {_sql(SideEffect.CONFIRMED)},
                result_ref = left(f.result_ref, {_max_length(Attempt, 'result_ref')})
            WHERE id = a.id RETURNING * INTO a;
            UPDATE ledger_job SET status = {succeeded}, next_check_at = NULL, check_count = 0,
                recovery_pending = false, updated_at = statement_timestamp()
            WHERE id = j.id;
            {confirmed}
            r_applied := {_sql(JobStatus.SUCCEEDED)};
        ELSIF f.outcome = {_sql(CheckOutcome.NOT_FOUND)} THEN
            UPDATE ledger_attempt SET version = version + 1, updated_at = statement_timestamp(),
                execution_state = {_sql(Execution.FAILED)},
                side_effect_state = CASE WHEN side_effect_state = {_sql(SideEffect.AMBIGUOUS)}
                                         THEN {_sql(SideEffect.NOT_FOUND)} ELSE {_sql(SideEffect.NOT_ATTEMPTED)} END
            WHERE id = a.id RETURNING * INTO a;
            {not_found}
            prev_number := a.number;
            {_new_attempt_sql()}
            UPDATE ledger_job SET status = {pending}, next_check_at = NULL, check_count = 0,
                recovery_pending = false, updated_at = statement_timestamp()
            WHERE id = j.id;
            {opened}
            r_applied := 'replayed';
        ELSE
            next_at := clock_timestamp() + f.delay * interval '1 second';
            UPDATE ledger_job SET check_count = f.new_count, next_check_at = next_at WHERE id = j.id;
            {unavailable}
            r_applied := 'backed_off';
        END IF;
        RETURN NEXT;
    END LOOP;
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
    if (finding is None or finding.outcome not in COMMON or job.status != JobStatus.NEEDS_RECONCILIATION
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
