"""Fill the ledger with a realistic history, fast (COPY), consistent with every constraint.

Most jobs succeeded long ago (one attempt, or a dead-lettered attempt then a success); a queue
of jobs waits for reconciliation or a human with an unknown or blocked latest attempt. Every
attempt's states are written by its last event and every job's status by its last event, so
`ledger_check` holds over the generated history.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import connection, transaction
from django.utils import timezone
from psycopg.types.json import Jsonb

from ledger.models import CHAIN_HASH

JOB_COLUMNS = ("id", "job_id", "tenant", "action", "payload", "identity", "idempotency_key", "status", "lease_seq",
               "next_check_at", "check_count", "recovery_pending", "created_at", "updated_at")
ATTEMPT_COLUMNS = ("id", "job_id", "number", "delivery_state", "execution_state", "side_effect_state", "lease_owner",
                   "lease_token", "lease_expires_at", "heartbeat_at", "observed_identity", "result_ref", "error",
                   "version", "created_at", "updated_at")
# prev_hash and hash are placeholders: the database's hash-chain trigger computes them on insert.
EVENT_COLUMNS = ("id", "job_id", "attempt_id", "at", "actor_type", "actor", "kind", "before", "after", "note",
                 "evidence", "prev_hash", "hash")
QUEUE_STATUSES = ("needs_reconciliation", "needs_operator", "escalated", "blocked")
TENANTS = ("acme", "globex", "initech", "umbrella", "hooli")
ACTIONS = ("billing.create_invoice", "mail.send", "social.publish_post")


def _copy(tables: list[tuple[str, tuple[str, ...], list[tuple]]]) -> None:
    """COPY the rows in, then hash-chain the new events set-wise, one event rank per UPDATE.

    The per-row chain trigger (one lookup per inserted row) is too slow for millions of rows, so
    it is off during the load; the chain is computed with the same expression, job by job, and
    `ledger_check` verifies it like any other history. Only for new jobs (generated ones).
    """
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT coalesce(max(id), 0) FROM ledger_ledgerevent")
        first_new_event = cursor.fetchone()[0] + 1
        cursor.execute("ALTER TABLE ledger_ledgerevent DISABLE TRIGGER USER")
        for table, columns, rows in tables:
            _check_columns(table, columns)
            with cursor.cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
            cursor.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT max(id) FROM {table}))")
        _chain(cursor, first_new_event)
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute("ALTER TABLE ledger_ledgerevent ENABLE TRIGGER USER")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE ledger_job; ANALYZE ledger_attempt; ANALYZE ledger_ledgerevent")


def _chain(cursor, first_event: int) -> None:
    cursor.execute("CREATE TEMP TABLE generated_chain ON COMMIT DROP AS SELECT id, job_id, "
                   "row_number() OVER (PARTITION BY job_id ORDER BY id) AS rank FROM ledger_ledgerevent "
                   "WHERE id >= %s", [first_event])
    cursor.execute("CREATE INDEX ON generated_chain (job_id, rank)")
    cursor.execute("SELECT coalesce(max(rank), 0) FROM generated_chain")
    for rank in range(1, cursor.fetchone()[0] + 1):
        cursor.execute(
            "UPDATE ledger_ledgerevent e SET prev_hash = coalesce(p.hash, '') FROM generated_chain c "
            "LEFT JOIN generated_chain pc ON pc.job_id = c.job_id AND pc.rank = c.rank - 1 "
            "LEFT JOIN ledger_ledgerevent p ON p.id = pc.id WHERE e.id = c.id AND c.rank = %s", [rank])
        cursor.execute(f"UPDATE ledger_ledgerevent e SET hash = {CHAIN_HASH.format(row='e')} "
                       "FROM generated_chain c WHERE e.id = c.id AND c.rank = %s", [rank])


class _History:
    """The events of one job, in order, with a clock that advances a little per event."""

    def __init__(self, job_pk: int, start: datetime, rng: random.Random, ids: itertools.count):
        self.job_pk, self.clock, self.rng, self.ids = job_pk, start, rng, ids
        self.rows: list[tuple] = []

    def add(self, attempt_pk, kind, before, after, actor_type="worker", actor="gen-worker", note="", evidence=None):
        self.clock += timedelta(milliseconds=self.rng.randint(5, 400))
        self.rows.append((next(self.ids), self.job_pk, attempt_pk, self.clock, actor_type, actor, kind,
                          Jsonb(before), Jsonb(after), note, Jsonb(evidence or {}), "", ""))


def states(job_status, number, delivery, execution, side_effect) -> dict:
    return {"job": job_status, "attempt": number, "delivery": delivery, "execution": execution,
            "side_effect": side_effect}


@dataclass
class Generated:
    jobs: int
    attempts: int
    events: int
    queued: int


def _check_columns(table: str, expected: tuple[str, ...]) -> None:
    """Fail loudly when the schema grows a required column this generator does not fill."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT column_name FROM information_schema.columns WHERE table_name = %s "
                       "AND is_nullable = 'NO' AND column_default IS NULL", [table])
        missing = {row[0] for row in cursor.fetchall()} - set(expected)
    if missing:
        raise RuntimeError(f"the generator does not fill {table}.{', '.join(sorted(missing))}: update bench/generate.py")


def _next_ids(table: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT coalesce(max(id), 0) + 1 FROM {table}")
        return cursor.fetchone()[0]


def generate(*, attempts: int, queued: int, prefix: str = "gen", seed: int = 1) -> Generated:
    """About `attempts` attempts in all, `queued` of whose jobs sit in the unknown-work queue."""
    rng = random.Random(seed)
    now = timezone.now()
    job_id, attempt_id = _next_ids("ledger_job"), _next_ids("ledger_attempt")
    event_ids = itertools.count(_next_ids("ledger_ledgerevent"))
    jobs, rows_attempts, rows_events = [], [], []
    made_attempts = n = 0
    while made_attempts < attempts:
        in_queue = n < queued
        status = QUEUE_STATUSES[n % len(QUEUE_STATUSES)] if in_queue else "succeeded"
        two_attempts = not in_queue and rng.random() < 0.1
        created = now - timedelta(seconds=rng.randint(60, 3 * 3600) if in_queue else rng.randint(3600, 30 * 86400))
        action = ACTIONS[n % len(ACTIONS)]
        name = f"{prefix}-{n:08d}"
        key = f"{action}:{name}"
        tenant = TENANTS[n % len(TENANTS)]
        history = _History(job_id, created, rng, event_ids)
        event = history.add
        number = 0
        if two_attempts:
            number = 1
            event(attempt_id, "enqueued", {}, states("pending", 1, "queued", "not_started", "not_attempted"),
                  actor_type="system", actor="producer")
            event(attempt_id, "claimed", states("pending", 1, "queued", "not_started", "not_attempted"),
                  states("running", 1, "leased", "running", "not_attempted"))
            event(attempt_id, "lease_expired_reclaimed", states("running", 1, "leased", "running", "not_attempted"),
                  states("running", 1, "dead_lettered", "failed", "not_attempted"), actor_type="system",
                  actor="lease-sweeper", note="lease expired before any side effect; safe to run again")
            rows_attempts.append((attempt_id, job_id, 1, "dead_lettered", "failed", "not_attempted", "gen-worker-0", 1,
                                  history.clock, history.clock, None, "", "lease expired before any side effect", 3, created,
                                  history.clock))
            attempt_id += 1
        number += 1
        first = number == 1
        if first:
            event(attempt_id, "enqueued", {}, states("pending", 1, "queued", "not_started", "not_attempted"),
                  actor_type="system", actor="producer")
        else:
            event(attempt_id, "attempt_opened", {"job": "running"},
                  states("pending", number, "queued", "not_started", "not_attempted"), actor_type="system",
                  actor="lease-sweeper")
        event(attempt_id, "claimed", states("pending", number, "queued", "not_started", "not_attempted"),
              states("running", number, "leased", "running", "not_attempted"))
        if status == "blocked":
            final = ("acknowledged", "blocked", "not_attempted")
            event(attempt_id, "identity_mismatch", states("running", number, "leased", "running", "not_attempted"),
                  states("blocked", number, *final), note="identity mismatch: account is 'other'")
            version = 3
        else:
            event(attempt_id, "side_effect_started", states("running", number, "leased", "running", "not_attempted"),
                  states("running", number, "leased", "running", "submitted"))
            if status == "succeeded":
                final = ("acknowledged", "succeeded", "confirmed")
                event(attempt_id, "succeeded", states("running", number, "leased", "running", "submitted"),
                      states("succeeded", number, *final), evidence={"status": 201})
            else:
                final = ("acknowledged", "unknown", "ambiguous")
                event(attempt_id, "observation_lost", states("running", number, "leased", "running", "submitted"),
                      states("needs_reconciliation", number, *final), note="read timeout after 10 s")
                if status != "needs_reconciliation":
                    event(attempt_id, status if status == "escalated" else "needs_operator",
                          states("needs_reconciliation", number, *final), states(status, number, *final),
                          actor_type="reconciler", actor="reconciler", note="handed to a human")
            version = 4
        rows_attempts.append((attempt_id, job_id, number, *final, f"gen-worker-{number}", number, history.clock, history.clock,
                              None, "" if status != "succeeded" else f"ref_{n}", "", version, created, history.clock))
        jobs.append((job_id, name, tenant, action, Jsonb({"n": n}), Jsonb({}), key, status, number,
                     None, 0, False, created, history.clock))
        rows_events.extend(history.rows)
        made_attempts += number
        attempt_id += 1
        job_id += 1
        n += 1
    _copy([("ledger_job", JOB_COLUMNS, jobs), ("ledger_attempt", ATTEMPT_COLUMNS, rows_attempts),
           ("ledger_ledgerevent", EVENT_COLUMNS, rows_events)])
    return Generated(jobs=len(jobs), attempts=len(rows_attempts), events=len(rows_events),
                     queued=min(queued, len(jobs)))




def pending_jobs(*, count: int, prefix: str, action: str = "reckon.echo") -> list[str]:
    """`count` freshly enqueued jobs (queued attempt, one `enqueued` event), not dispatched."""
    now = timezone.now()
    job_id, attempt_id = _next_ids("ledger_job"), _next_ids("ledger_attempt")
    event_id = _next_ids("ledger_ledgerevent")
    jobs, attempts, events, names = [], [], [], []
    for n in range(count):
        name = f"{prefix}-{n:07d}"
        names.append(name)
        jobs.append((job_id + n, name, "bench", action, Jsonb({"n": n}), Jsonb({}), f"{action}:{name}", "pending", 0,
                     None, 0, False, now, now))
        attempts.append((attempt_id + n, job_id + n, 1, "queued", "not_started", "not_attempted", "", None, None,
                         None, None, "", "", 1, now, now))
        events.append((event_id + n, job_id + n, attempt_id + n, now, "system", "bench", "enqueued", Jsonb({}),
                       Jsonb(states("pending", 1, "queued", "not_started", "not_attempted")), "", Jsonb({}), "", ""))
    _copy([("ledger_job", JOB_COLUMNS, jobs), ("ledger_attempt", ATTEMPT_COLUMNS, attempts),
           ("ledger_ledgerevent", EVENT_COLUMNS, events)])
    return names
