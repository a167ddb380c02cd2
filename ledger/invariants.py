"""Whole-database invariant checks behind `manage.py ledger_check`.

Each check is one set-based query (it must stay fast on a million attempts) returning the
offending rows; the constraints make most of them impossible, and this proves it.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import connection

from ledger.models import CHAIN_HASH
from ledger.states import CONSISTENCY, JOB_STATUS_FOR_LATEST, LIVE_EXECUTION, Execution
from ledger.tombstones import LIVE_WITH_TOMBSTONE_SQL


@dataclass
class Finding:
    check: str
    description: str
    count: int
    examples: list[str]


def _quoted(values) -> str:
    return ", ".join(f"'{v.value if hasattr(v, 'value') else v}'" for v in values)


def _consistency_sql() -> str:
    clauses = []
    for execution, (deliveries, side_effects) in CONSISTENCY.items():
        allowed = f"a.side_effect_state IN ({_quoted(side_effects)})"
        if deliveries:
            allowed += f" AND a.delivery_state IN ({_quoted(deliveries)})"
        clauses.append(f"(a.execution_state = '{execution.value}' AND NOT ({allowed}))")
    return " OR ".join(clauses)


def _allowed_status_pairs() -> str:
    return ", ".join(
        f"('{execution.value}', '{status.value}')"
        for execution, statuses in JOB_STATUS_FOR_LATEST.items()
        for status in statuses
    )


# The hash each job's first online event must follow: its last archived hash, as the latest
# checkpoint carries it (issue 28), or none for a job whose history is all online.
ARCHIVED_HASH = ("coalesce((SELECT c.carried FROM ledger_historycheckpoint c ORDER BY c.range_end DESC LIMIT 1) "
                 "->> {job}::text, '')")

# Every event's hash recomputed, and its prev_hash compared with the previous event of its job
# (for the first one online: the checkpoint's hash where the job's history was partly archived).
BROKEN_CHAIN_SQL = f"""
    SELECT c.job_id, min(c.id) AS first_broken FROM (
        SELECT e.id, e.job_id, e.prev_hash, e.hash,
               lag(e.hash, 1, {ARCHIVED_HASH.format(job="e.job_id")}) OVER (PARTITION BY e.job_id ORDER BY e.id)
                   AS expected_prev,
               {CHAIN_HASH.format(row="e")} AS recomputed
        FROM ledger_ledgerevent e {{where}}) c
    WHERE c.prev_hash <> c.expected_prev OR c.hash <> c.recomputed
    GROUP BY c.job_id"""  # nosec B608  # SQL built from module constants (state names, fixed text); values are bound parameters


def first_broken_event(job_pk: int) -> int | None:
    """The id of the first event of this job whose hash link does not hold, or None: verified."""
    with connection.cursor() as cursor:
        cursor.execute(BROKEN_CHAIN_SQL.format(where="WHERE e.job_id = %s"), [job_pk])
        row = cursor.fetchone()
    return row[1] if row else None


# The invariant itself, read from the history rather than from the index that enforces it: each
# event's `after` says what state its attempt was in from that event until the attempt's next
# event; no attempt may be live in an event that falls while another attempt of its job was
# unknown. (Every writer records the attempt it changes, so this is the history's own account.)
LIVE_WHILE_UNKNOWN_SQL = f"""
    WITH states AS (
        SELECT e.job_id, e.id, (e.after->>'attempt')::int AS number, e.after->>'execution' AS execution,
               lead(e.id) OVER (PARTITION BY e.job_id, e.after->>'attempt' ORDER BY e.id) AS until
        FROM ledger_ledgerevent e WHERE e.after ? 'attempt' AND e.after ? 'execution'
    )
    SELECT j.job_id || ': attempt ' || live.number || ' ' || live.execution || ' at event ' || live.id
           || ' while attempt ' || unknown.number || ' was unknown (since event ' || unknown.id || ')'
    FROM states unknown
    JOIN states live ON live.job_id = unknown.job_id AND live.number <> unknown.number
                    AND live.id > unknown.id AND (unknown.until IS NULL OR live.id < unknown.until)
                    AND live.execution IN ({_quoted(LIVE_EXECUTION)})
    JOIN ledger_job j ON j.id = unknown.job_id
    WHERE unknown.execution = '{Execution.UNKNOWN.value}'"""  # nosec B608  # SQL built from module constants (state names, fixed text)

CHECKS: list[tuple[str, str, str]] = [
    (
        "live_while_unknown_in_history",
        "jobs whose history shows an attempt made live while another attempt of the job was unknown",
        LIVE_WHILE_UNKNOWN_SQL,
    ),
    (
        "two_live_attempts",
        "jobs with more than one live attempt",
        f"""SELECT j.job_id FROM ledger_attempt a JOIN ledger_job j ON j.id = a.job_id
         WHERE a.execution_state IN ({_quoted(LIVE_EXECUTION)})
         GROUP BY j.job_id HAVING count(*) > 1""",  # nosec B608  # SQL built from module constants (state names, fixed text); values are bound parameters
    ),
    (
        "inconsistent_attempt",
        "attempts whose three ledgers contradict each other "
        "(e.g. succeeded without confirmed, unknown without ambiguous)",
        f"""SELECT j.job_id || '#' || a.number || ' ' || a.execution_state || '/' || a.side_effect_state
         || '/' || a.delivery_state FROM ledger_attempt a JOIN ledger_job j ON j.id = a.job_id
         WHERE {_consistency_sql()}""",  # nosec B608  # SQL built from module constants (state names, fixed text); values are bound parameters
    ),
    (
        "running_without_lease",
        "running attempts without a complete lease",
        """SELECT j.job_id || '#' || a.number FROM ledger_attempt a JOIN ledger_job j ON j.id = a.job_id
        WHERE a.execution_state = 'running'
          AND (a.lease_owner = '' OR a.lease_token IS NULL OR a.lease_expires_at IS NULL)""",
    ),
    (
        "job_without_attempt",
        "jobs with no attempt at all",
        """SELECT j.job_id FROM ledger_job j
        WHERE NOT EXISTS (SELECT 1 FROM ledger_attempt a WHERE a.job_id = j.id)""",
    ),
    (
        "status_disagrees",
        "jobs whose status disagrees with their latest attempt",
        f"""SELECT j.job_id || ' is ' || j.status || ', latest attempt ' || latest.execution_state
         FROM ledger_job j
         JOIN LATERAL (SELECT a.execution_state FROM ledger_attempt a WHERE a.job_id = j.id
                       ORDER BY a.number DESC LIMIT 1) latest ON true
         WHERE (latest.execution_state, j.status) NOT IN ({_allowed_status_pairs()})""",  # nosec B608  # SQL built from module constants (state names, fixed text); values are bound parameters
    ),
    (
        "attempt_change_without_event",
        "attempts whose current states were not written by an event",
        f"""SELECT j.job_id || '#' || a.number FROM ledger_attempt a JOIN ledger_job j ON j.id = a.job_id
        LEFT JOIN LATERAL (SELECT e.after FROM ledger_ledgerevent e
                           WHERE e.attempt_id = a.id AND e.after ? 'execution'
                           ORDER BY e.id DESC LIMIT 1) last ON true
        WHERE CASE WHEN last.after IS NULL  -- no event online: fine only where it was archived
                   THEN {ARCHIVED_HASH.format(job="a.job_id")} = ''
                   ELSE last.after->>'execution' IS DISTINCT FROM a.execution_state
                     OR last.after->>'delivery' IS DISTINCT FROM a.delivery_state
                     OR last.after->>'side_effect' IS DISTINCT FROM a.side_effect_state END""",  # nosec B608  # SQL built from module constants
    ),
    (
        "job_change_without_event",
        "jobs whose current status was not written by an event",
        """SELECT j.job_id || ' is ' || j.status FROM ledger_job j
        LEFT JOIN LATERAL (SELECT e.after FROM ledger_ledgerevent e WHERE e.job_id = j.id
                           ORDER BY e.id DESC LIMIT 1) last ON true
        WHERE last.after IS NULL OR last.after->>'job' IS DISTINCT FROM j.status""",
    ),
    (
        "fencing_token_reused",
        "fencing tokens used by two attempts of one job",
        """SELECT j.job_id || ' token ' || a.lease_token FROM ledger_attempt a JOIN ledger_job j ON j.id = a.job_id
        WHERE a.lease_token IS NOT NULL GROUP BY j.job_id, a.lease_token HAVING count(*) > 1""",
    ),
    (
        "fencing_token_ahead",
        "attempts holding a fencing token the job never issued",
        """SELECT j.job_id || '#' || a.number FROM ledger_attempt a JOIN ledger_job j ON j.id = a.job_id
        WHERE a.lease_token > j.lease_seq""",
    ),
    (
        "job_with_tombstone",
        "live jobs whose id or key has a tombstone: an archived job's key that ran again",
        LIVE_WITH_TOMBSTONE_SQL,
    ),
    (
        "history_chain_broken",
        "jobs whose event hash chain is broken (first broken event shown)",
        f"""SELECT j.job_id || ' at event ' || b.first_broken FROM ({BROKEN_CHAIN_SQL.format(where="")}) b
        JOIN ledger_job j ON j.id = b.job_id""",  # nosec B608  # SQL built from module constants (state names, fixed text); values are bound parameters
    ),
    (
        "history_not_protected",
        "the append-only or hash-chain trigger on the event table is missing or disabled",
        """SELECT name FROM (VALUES ('pgtrigger_append_only_'), ('reckon_hash_chain')) AS t(name)
        WHERE NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = 'ledger_ledgerevent'::regclass
                            AND starts_with(tgname, t.name) AND tgenabled <> 'D')""",
    ),
]


def find_violations(*, examples: int = 5) -> list[Finding]:
    findings = []
    with connection.cursor() as cursor:
        for name, description, sql in CHECKS:
            cursor.execute(f"SELECT count(*) OVER (), v.* FROM ({sql}) v LIMIT %s", [examples])  # nosec B608  # each check's SQL is a constant of this module; the limit is bound
            rows = cursor.fetchall()
            findings.append(
                Finding(
                    check=name,
                    description=description,
                    count=rows[0][0] if rows else 0,
                    examples=[str(row[1]) for row in rows],
                )
            )
    return findings
