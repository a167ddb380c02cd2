"""Fill the ledger with a realistic history, fast (COPY), consistent with every constraint.

Most jobs succeeded long ago (one attempt, or a dead-lettered attempt then a success); a queue
of jobs waits for reconciliation or a human with an unknown or blocked latest attempt. Every
attempt's states are written by its last event and every job's status by its last event, so
`ledger_check` holds over the generated history.

The events' hash chain (normally the database trigger's work, see `ledger.models.CHAIN_HASH`)
is computed here, in Python, over exactly the text the SQL expression hashes: JSON values are
written in PostgreSQL's own jsonb output form (`jsonb_text`) and timestamps are whole
microseconds, so `extract(epoch from at)::text` is known before the row exists. The rows are
streamed in batches of jobs, so memory stays flat however large the history.
"""

from __future__ import annotations

import functools
import gc
import hashlib
import itertools
import json
import random
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.db import connection, transaction
from django.utils import timezone

from ledger.partitions import ensure as ensure_partitions
from ledger.partitions import ensure_ahead, partitions
from ledger.tombstones import TOMBSTONES, matching

JOB_COLUMNS = ("id", "job_id", "tenant", "action", "payload", "identity", "idempotency_key", "status", "lease_seq",
               "next_check_at", "check_count", "recovery_pending", "created_at", "updated_at")
ATTEMPT_COLUMNS = ("id", "job_id", "number", "delivery_state", "execution_state", "side_effect_state", "lease_owner",
                   "lease_token", "lease_expires_at", "heartbeat_at", "observed_identity", "result_ref", "error",
                   "version", "created_at", "updated_at")
EVENT_COLUMNS = ("id", "job_id", "attempt_id", "at", "actor_type", "actor", "kind", "before", "after", "note",
                 "evidence", "prev_hash", "hash")
QUEUE_STATUSES = ("needs_reconciliation", "needs_operator", "escalated", "blocked")
TENANTS = ("acme", "globex", "initech", "umbrella", "hooli")
ACTIONS = ("billing.create_invoice", "mail.send", "social.publish_post")
BATCH_JOBS = 50_000  # jobs per round of COPYs: bounds memory, keeps each COPY large
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND = timedelta(microseconds=1)


# --- the chain, as the database computes it --------------------------------------------------

def jsonb_text(value) -> str:
    """`value::jsonb::text` as PostgreSQL renders it: keys ordered by length then bytes, ", " and ": "
    separators, strings escaped like json.dumps(ensure_ascii=False). Floats are refused: their
    text would be PostgreSQL's numeric output, which Python's repr does not always match."""
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return "null"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, dict):
        keys = sorted(value, key=lambda k: (len(k.encode()), k.encode()))
        return "{" + ", ".join(f"{json.dumps(k, ensure_ascii=False)}: {jsonb_text(value[k])}" for k in keys) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(jsonb_text(item) for item in value) + "]"
    raise TypeError(f"jsonb_text renders str, int, bool, None, dict and list, not {type(value).__name__}")


def epoch_text(at: datetime) -> str:
    """`extract(epoch from at)::text` for a timestamptz: seconds with exactly six decimals."""
    return _epoch_text((at - EPOCH) // MICROSECOND)


def _epoch_text(micros: int) -> str:
    sign, micros = ("-", -micros) if micros < 0 else ("", micros)
    return f"{sign}{micros // 1_000_000}.{micros % 1_000_000:06d}"


def chain_hash(prev_hash: str, job_pk: int, attempt_pk: int | None, at: datetime, actor_type: str, actor: str,
               kind: str, before: str, after: str, note: str, evidence: str) -> str:
    """ledger.models.CHAIN_HASH over one event; `before`, `after` and `evidence` are jsonb texts."""
    text = "\x1f".join((prev_hash, str(job_pk), "" if attempt_pk is None else str(attempt_pk), epoch_text(at),
                        actor_type, actor, kind, before, after, note, evidence))
    return hashlib.sha256(text.encode()).hexdigest()


# --- loading ---------------------------------------------------------------------------------

TABLES = (("ledger_job", JOB_COLUMNS), ("ledger_attempt", ATTEMPT_COLUMNS), ("ledger_ledgerevent", EVENT_COLUMNS))
HISTORY_DAYS = 30  # how far back the generated history goes
REBUILD_FROM = 50_000  # loads of at least this many events (and more than the table holds) rebuild indexes
ANALYZE_SHARE = 0.1  # loads of at least this share of the events the table held refresh its statistics


def _copy(histories: Iterable[tuple[tuple, list[tuple], list[tuple]]], *, events: int,
          days: int = HISTORY_DAYS) -> dict[str, float]:
    """COPY (job row, attempt rows, event rows) per job in, in one transaction; `events` is about how many.

    The rows carry their hash chain already (each chain starts at its job's first event: the
    jobs are new), so the event table's triggers stay off during the load: the per-row chain
    trigger (a lookup per row) is what made a million-attempt load crawl. `ledger_check`
    verifies the chain like any other history. As a superuser (scratch and development
    clusters), triggers and row-by-row foreign-key checks are skipped for the session
    (session_replication_role = replica) and the foreign keys of the new rows, and the job table's
    tombstone rule, are verified set-wise afterwards; a load larger than the tables also drops
    their plain indexes and rebuilds them at the end, which is several times faster than
    maintaining them row by row.
    Both hold exclusive locks until commit: this is a loader for benchmark and demo databases.
    Returns the seconds each phase took.
    """
    gc_was_enabled = gc.isenabled()
    gc.disable()  # millions of short-lived tuples: the cyclic collector would cost a third of the time
    try:
        return _load(histories, events=events, days=days)
    finally:
        if gc_was_enabled:
            gc.enable()


def _load(histories: Iterable[tuple[tuple, list[tuple], list[tuple]]], *, events: int,
          days: int = HISTORY_DAYS) -> dict[str, float]:
    phases, started = {}, time.monotonic()

    def phase(name):
        nonlocal started
        phases[name] = round(time.monotonic() - started, 1)
        started = time.monotonic()

    for table, columns in TABLES:
        _check_columns(table, columns)
    now = timezone.now()
    ensure_partitions(now - timedelta(days=days + 1), now + timedelta(days=1))  # the event table's, by time
    first_ids = {table: _next_ids(table) for table, _ in TABLES}
    with transaction.atomic(), connection.cursor() as cursor:
        superuser = _is_superuser(cursor)
        if superuser:
            cursor.execute("SET LOCAL session_replication_role = replica")
        else:
            cursor.execute("ALTER TABLE ledger_ledgerevent DISABLE TRIGGER USER")
        rebuild = []
        if superuser and events >= max(REBUILD_FROM, first_ids["ledger_ledgerevent"]):
            rebuild = _drop_plain_indexes(cursor)
        _stream(cursor.cursor, iter(histories))
        if superuser:  # the jobs' search text, which the skipped trigger writes otherwise (ledger.JobSearchText)
            cursor.execute("INSERT INTO ledger_jobsearchtext (job_id, tenant, text) SELECT id, tenant, "
                           "job_id || ' ' || idempotency_key || ' ' || payload::text FROM ledger_job WHERE id >= %s",
                           [first_ids["ledger_job"]])
        phase("copy")
        for table, _ in TABLES:
            cursor.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "  # nosec B608  # table names from this module's TABLES constant
                           f"(SELECT coalesce(max(id), 1) FROM {table}))")
        if rebuild:
            cursor.execute("SET LOCAL maintenance_work_mem = '256MB'")
            for definition in rebuild:
                cursor.execute(definition)
            phase("indexes")
        if superuser:
            cursor.execute("SET LOCAL session_replication_role = origin")
            _verify_foreign_keys(cursor, first_ids)
            _verify_not_archived(cursor, first_ids)
        else:
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
            cursor.execute("ALTER TABLE ledger_ledgerevent ENABLE TRIGGER USER")
    phase("checks+commit")
    with connection.cursor() as cursor:
        if connection.in_atomic_block:  # a caller's transaction (tests): VACUUM cannot run in one
            cursor.execute("ANALYZE ledger_job, ledger_attempt, ledger_ledgerevent, ledger_jobsearchtext")
            phase("analyze")
        else:
            # What autovacuum would soon do anyway (while a benchmark measures): the visibility map
            # and hint bits of a table that has settled, as a long-lived ledger's has; and new
            # statistics when the load added at least a tenth of the events, as its analyze threshold
            # (autovacuum_analyze_scale_factor) would, not after each small batch of pending jobs:
            # ANALYZE of the partitioned event table and the search text took a second a load.
            analyze = events >= ANALYZE_SHARE * first_ids["ledger_ledgerevent"]
            cursor.execute(f"VACUUM {'(ANALYZE) ' if analyze else ''}"
                           "ledger_job, ledger_attempt, ledger_ledgerevent, ledger_jobsearchtext")
            phase("vacuum")
    return phases


def _is_superuser(cursor) -> bool:
    cursor.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
    return cursor.fetchone()[0]


def _stream(cursor, histories: Iterator[tuple[tuple, list[tuple], list[tuple]]]) -> None:
    """Batch by batch, the events COPY first while their jobs are generated (so PostgreSQL works
    while Python hashes), then the batch's jobs and attempts. Foreign keys are not checked row by
    row here (skipped, or deferred to the end), so the order does not matter."""
    columns = {table: ", ".join(names) for table, names in TABLES}
    while True:
        jobs, attempts = [], []
        with cursor.copy(f"COPY ledger_ledgerevent ({columns['ledger_ledgerevent']}) FROM STDIN") as copy:
            write = copy.write_row
            for job, job_attempts, job_events in itertools.islice(histories, BATCH_JOBS):
                jobs.append(job)
                attempts.extend(job_attempts)
                for row in job_events:
                    write(row)
        if not jobs:
            return
        for table, rows in (("ledger_job", jobs), ("ledger_attempt", attempts)):
            with cursor.copy(f"COPY {table} ({columns[table]}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)


def _drop_plain_indexes(cursor) -> list[str]:
    """Drop the indexes that back no constraint of the three tables and the jobs' search text;
    their CREATE INDEX statements."""
    cursor.execute("SELECT indexrelid::regclass::text, pg_get_indexdef(indexrelid) FROM pg_index "
                   "WHERE indrelid = ANY (ARRAY['ledger_job', 'ledger_attempt', 'ledger_ledgerevent', "
                   "'ledger_jobsearchtext']::regclass[]) "
                   "AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = indexrelid) "
                   "ORDER BY indexrelid")
    indexes = cursor.fetchall()
    for name, _ in indexes:
        cursor.execute(f"DROP INDEX {name}")
    # A partitioned table's index reads ON ONLY (its partitions' indexes attached later): ON builds them all.
    return [definition.replace(" ON ONLY ", " ON ") for _, definition in indexes]


def _verify_not_archived(cursor, first_ids: dict[str, int]) -> None:
    """The job table's trigger (an archived id or key is never a job again, ledger.tombstones) was
    skipped with the others: the new jobs, checked set-wise."""
    cursor.execute(f"SELECT count(*) FROM ledger_job j WHERE j.id >= %s "  # nosec B608  # SQL generated from the models' names
                   f"AND EXISTS (SELECT 1 FROM {TOMBSTONES} t WHERE {matching('j')})", [first_ids["ledger_job"]])
    archived = cursor.fetchone()[0]
    if archived:
        raise RuntimeError(f"the generator wrote {archived} jobs whose id or key was archived (a tombstone has it)")


def _verify_foreign_keys(cursor, first_ids: dict[str, int]) -> None:
    """The new rows' references, checked set-wise (the row-by-row checks were skipped)."""
    checks = {
        "attempt.job": "SELECT count(*) FROM ledger_attempt a WHERE a.id >= %s "
                       "AND NOT EXISTS (SELECT 1 FROM ledger_job j WHERE j.id = a.job_id)",
        "event.job": "SELECT count(*) FROM ledger_ledgerevent e WHERE e.id >= %s "
                     "AND NOT EXISTS (SELECT 1 FROM ledger_job j WHERE j.id = e.job_id)",
        "event.attempt": "SELECT count(*) FROM ledger_ledgerevent e WHERE e.id >= %s AND e.attempt_id IS NOT NULL "
                         "AND NOT EXISTS (SELECT 1 FROM ledger_attempt a WHERE a.id = e.attempt_id)",
    }
    for name, sql in checks.items():
        cursor.execute(sql, [first_ids["ledger_attempt" if name.startswith("attempt") else "ledger_ledgerevent"]])
        dangling = cursor.fetchone()[0]
        if dangling:
            raise RuntimeError(f"the generator wrote {dangling} rows with a dangling {name} reference")


STEPS = tuple(timedelta(milliseconds=ms) for ms in range(5, 401))  # the clock's step between events


class _History:
    """The events of one job, in order and hash-chained, with a clock that advances a little per event."""

    def __init__(self, job_pk: int, start: datetime, rng: random.Random, ids: itertools.count):
        self.job_pk, self.clock, self.rng, self.ids = job_pk, start, rng, ids
        self.micros = (start - EPOCH) // MICROSECOND
        self.rows: list[tuple] = []
        self.last_hash = ""
        self.job_text = str(job_pk)

    def add(self, attempt_pk, kind, before, after, actor_type="worker", actor="gen-worker", note="", evidence="{}"):
        """One event; `before`, `after` and `evidence` are dicts or (faster) their jsonb_text."""
        step = int(self.rng.random() * len(STEPS))
        self.clock += STEPS[step]
        self.micros += (step + 5) * 1000
        before, after, evidence = _as_jsonb(before), _as_jsonb(after), _as_jsonb(evidence)
        text = "\x1f".join((self.last_hash, self.job_text, "" if attempt_pk is None else str(attempt_pk),
                            _epoch_text(self.micros), actor_type, actor, kind, before, after, note, evidence))
        digest = hashlib.sha256(text.encode()).hexdigest()
        self.rows.append((next(self.ids), self.job_pk, attempt_pk, self.clock, actor_type, actor, kind,
                          before, after, note, evidence, self.last_hash, digest))
        self.last_hash = digest


def _as_jsonb(value) -> str:
    return value if isinstance(value, str) else jsonb_text(value)


def states(job_status, number, delivery, execution, side_effect) -> dict:
    return {"job": job_status, "attempt": number, "delivery": delivery, "execution": execution,
            "side_effect": side_effect}


@functools.cache
def _states(job_status, number, delivery, execution, side_effect) -> str:
    """states(...) as jsonb text; the handful of combinations are rendered once."""
    return jsonb_text(states(job_status, number, delivery, execution, side_effect))


class _Steady:
    """A history clock's random source that advances every step alike."""

    def random(self) -> float:
        return 0.0


def unknown_jobs(jobs: list[tuple[str, str, str, dict, dict]], *, next_check_at: datetime | None = None,
                 note: str = "read timeout after 10 s") -> None:
    """COPY in one job per (job_id, tenant, action, payload, identity) whose only attempt began its
    side effect and lost sight of it (enqueued, claimed, side effect started, observation lost,
    hash-chained), all waiting for reconciliation: due at `next_check_at`, or now."""
    now = timezone.now().replace(tzinfo=UTC)
    job_pk, attempt_pk = _next_ids("ledger_job"), _next_ids("ledger_attempt")
    event_ids = itertools.count(_next_ids("ledger_ledgerevent"))
    queued = _states("pending", 1, "queued", "not_started", "not_attempted")
    running = _states("running", 1, "leased", "running", "not_attempted")
    submitted = _states("running", 1, "leased", "running", "submitted")
    final = ("acknowledged", "unknown", "ambiguous")
    unknown = _states("needs_reconciliation", 1, *final)

    def histories():
        for n, (job_id, tenant, action, payload, identity) in enumerate(jobs):
            created = now - timedelta(minutes=5)
            history = _History(job_pk + n, created, _Steady(), event_ids)
            history.add(attempt_pk + n, "enqueued", "{}", queued, actor_type="system", actor="producer")
            history.add(attempt_pk + n, "claimed", queued, running)
            history.add(attempt_pk + n, "side_effect_started", running, submitted)
            history.add(attempt_pk + n, "observation_lost", submitted, unknown, note=note)
            job = (job_pk + n, job_id, tenant, action, jsonb_text(payload), jsonb_text(identity),
                   f"{action}:{job_id}", "needs_reconciliation", 1, next_check_at, 0, False, created, history.clock)
            attempt = (attempt_pk + n, job_pk + n, 1, *final, "bench-worker", 1, history.clock, history.clock, None,
                       "", "", 4, created, history.clock)
            yield job, [attempt], history.rows

    _copy(histories(), events=len(jobs) * 4)


@dataclass
class Generated:
    jobs: int = 0
    attempts: int = 0
    events: int = 0
    queued: int = 0
    phases: dict[str, float] = field(default_factory=dict)  # seconds per loading phase


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
        cursor.execute(f"SELECT coalesce(max(id), 0) + 1 FROM {table}")  # nosec B608  # table names from this module's TABLES constant
        return cursor.fetchone()[0]


def generate(*, attempts: int, queued: int, prefix: str = "gen", seed: int = 1, days: int = HISTORY_DAYS) -> Generated:
    """About `attempts` attempts in all, `queued` of whose jobs sit in the unknown-work queue; the
    finished ones spread over the last `days` days."""
    made = Generated()
    first_ids = tuple(_next_ids(table) for table, _ in TABLES)  # before any COPY starts
    made.phases = _copy(_histories(attempts=attempts, queued=queued, prefix=prefix, seed=seed, made=made,
                                   first_ids=first_ids, days=days), events=attempts * 4, days=days)
    made.queued = min(queued, made.jobs)
    return made


def _histories(*, attempts: int, queued: int, prefix: str, seed: int, made: Generated,
               first_ids: tuple[int, int, int], days: int = HISTORY_DAYS):
    """One (job row, attempt rows, event rows) per job, counted into `made` as they are produced."""
    rng = random.Random(seed)  # nosec B311  # a seeded generator for a reproducible synthetic history, not security
    now = timezone.now().replace(tzinfo=UTC)
    job_id, attempt_id, event_id = first_ids
    event_ids = itertools.count(event_id)
    n = 0
    while made.attempts < attempts:
        in_queue = n < queued
        status = QUEUE_STATUSES[n % len(QUEUE_STATUSES)] if in_queue else "succeeded"
        two_attempts = not in_queue and rng.random() < 0.1
        created = now - timedelta(seconds=rng.randint(60, 3 * 3600) if in_queue else rng.randint(3600, days * 86400))
        action = ACTIONS[n % len(ACTIONS)]
        name = f"{prefix}-{n:08d}"
        key = f"{action}:{name}"
        tenant = TENANTS[n % len(TENANTS)]
        history = _History(job_id, created, rng, event_ids)
        event = history.add
        rows_attempts = []
        number = 0
        if two_attempts:
            number = 1
            event(attempt_id, "enqueued", "{}", _states("pending", 1, "queued", "not_started", "not_attempted"),
                  actor_type="system", actor="producer")
            event(attempt_id, "claimed", _states("pending", 1, "queued", "not_started", "not_attempted"),
                  _states("running", 1, "leased", "running", "not_attempted"))
            event(attempt_id, "lease_expired_reclaimed", _states("running", 1, "leased", "running", "not_attempted"),
                  _states("running", 1, "dead_lettered", "failed", "not_attempted"), actor_type="system",
                  actor="lease-sweeper", note="lease expired before any side effect; safe to run again")
            rows_attempts.append((attempt_id, job_id, 1, "dead_lettered", "failed", "not_attempted", "gen-worker-0", 1,
                                  history.clock, history.clock, None, "", "lease expired before any side effect", 3,
                                  created, history.clock))
            attempt_id += 1
        number += 1
        if number == 1:
            event(attempt_id, "enqueued", "{}", _states("pending", 1, "queued", "not_started", "not_attempted"),
                  actor_type="system", actor="producer")
        else:
            event(attempt_id, "attempt_opened", '{"job": "running"}',
                  _states("pending", number, "queued", "not_started", "not_attempted"), actor_type="system",
                  actor="lease-sweeper")
        event(attempt_id, "claimed", _states("pending", number, "queued", "not_started", "not_attempted"),
              _states("running", number, "leased", "running", "not_attempted"))
        if status == "blocked":
            final = ("acknowledged", "blocked", "not_attempted")
            event(attempt_id, "identity_mismatch", _states("running", number, "leased", "running", "not_attempted"),
                  _states("blocked", number, *final), note="identity mismatch: account is 'other'")
            version = 3
        else:
            event(attempt_id, "side_effect_started", _states("running", number, "leased", "running", "not_attempted"),
                  _states("running", number, "leased", "running", "submitted"))
            if status == "succeeded":
                final = ("acknowledged", "succeeded", "confirmed")
                event(attempt_id, "succeeded", _states("running", number, "leased", "running", "submitted"),
                      _states("succeeded", number, *final), evidence='{"status": 201}')
            else:
                final = ("acknowledged", "unknown", "ambiguous")
                event(attempt_id, "observation_lost", _states("running", number, "leased", "running", "submitted"),
                      _states("needs_reconciliation", number, *final), note="read timeout after 10 s")
                if status != "needs_reconciliation":
                    event(attempt_id, "reconciled_conflict" if status == "escalated" else "reconciliation_gave_up",
                          _states("needs_reconciliation", number, *final), _states(status, number, *final),
                          actor_type="reconciler", actor="reconciler", note="handed to a human")
            version = 4
        rows_attempts.append((attempt_id, job_id, number, *final, f"gen-worker-{number}", number, history.clock,
                              history.clock, None, "" if status != "succeeded" else answer(action, job_id), "", version,
                              created, history.clock))
        job = (job_id, name, tenant, action, payload(action, n, tenant), "{}", key, status, number, None, 0, False,
               created, history.clock)
        made.jobs += 1
        made.attempts += number
        made.events += len(history.rows)
        yield job, rows_attempts, history.rows
        attempt_id += 1
        job_id += 1
        n += 1


def payload(action: str, n: int, tenant: str) -> str:
    """Job `n`'s payload as JSON text, as the demo's actions take it: what an operator pastes into
    the search (the customer's email address, the customer id) is in there, unique per job."""
    if action == "mail.send":
        return (f'{{"to": "customer{n}@{tenant}.example", "body": "Thank you for your order #{n}.", '
                f'"subject": "Your receipt"}}')
    if action == "billing.create_invoice":
        return (f'{{"currency": "EUR", "customer": "cus_{tenant}_{n}", "amount_cents": {500 + n % 250_000}, '
                f'"description": "Monthly plan"}}')
    return f'{{"body": "Release notes {n} are out"}}'


def answer(action: str, n: int) -> str:
    """What the provider answered the job of primary key `n` with (its attempt's result_ref): an
    invoice id, a Message-ID, a post id; one job's own, whichever history it is in."""
    if action == "billing.create_invoice":
        return f"inv_{n:010X}"
    if action == "mail.send":
        return f"<{n}.gen@mail.sandbox.example>"
    return f"post_{n}"


def pending_jobs(*, count: int, prefix: str, action: str = "reckon.echo", tenant: str = "bench") -> list[str]:
    """`count` freshly enqueued jobs (queued attempt, one `enqueued` event), not dispatched."""
    now = timezone.now().replace(tzinfo=UTC)
    job_id, attempt_id = _next_ids("ledger_job"), _next_ids("ledger_attempt")
    event_id = _next_ids("ledger_ledgerevent")
    after = _states("pending", 1, "queued", "not_started", "not_attempted")
    names = [f"{prefix}-{n:07d}" for n in range(count)]

    def histories():
        for n, name in enumerate(names):
            at = now + n * MICROSECOND  # distinct, in order: the queue's order is the creation order
            job = (job_id + n, name, tenant, action, payload("mail.send", n, "bench"), "{}", f"{action}:{name}", "pending", 0,
                   None, 0, False, at, at)
            attempt = (attempt_id + n, job_id + n, 1, "queued", "not_started", "not_attempted", "", None, None,
                       None, None, "", "", 1, now, now)
            digest = chain_hash("", job_id + n, attempt_id + n, now, "system", "bench", "enqueued", "{}", after, "",
                                "{}")
            event = (event_id + n, job_id + n, attempt_id + n, now, "system", "bench", "enqueued", "{}", after, "",
                     "{}", "", digest)
            yield job, [attempt], [event]

    _copy(histories(), events=count)
    return names


def empty_ledger(days: int = 40) -> None:
    """No job, attempt or event: every event partition dropped, the last `days` days' and those
    ahead made anew."""
    with connection.cursor() as cursor:
        for partition in partitions():
            cursor.execute(f'DROP TABLE "{partition.name}"')
        cursor.execute("TRUNCATE ledger_historycheckpoint, ledger_jobtombstone, ledger_ledgerevent, "
                       "ledger_jobsearchtext, ledger_attempt, ledger_job CASCADE")
        cursor.execute("SELECT now() - make_interval(days => %s)", [days])
        (start,) = cursor.fetchone()
    ensure_partitions(start, start + timedelta(days=days + 1))
    ensure_ahead()
