"""Retention: expired partitions of the history leave the database, archived and checkpointed.

A pass (`manage.py archive_history`) takes the oldest partitions whose period ended longer ago
than the retention of every tenant with events in them, one at a time, oldest first, and for each,
in one transaction:

1. locks the partition against new events (SHARE) and the rows of every job with events in it;
   a job that is not finished (unknown, waiting for a person, held by an approval, running,
   queued) or that someone holds stops the pass there: nothing is archived out of order;
2. writes the archive file (ledger.archive) beside its final name, flushes it to disk and
   renames it into place;
3. records the checkpoint (the file's figures and sha256, the hashes carried on for jobs whose
   history goes on online), a tombstone for each job whose whole history is now archived, and
   removes those jobs' rows (the job, its attempts, what refers to them, written to the file).
   A job whose id or key has a tombstone already (it ran again after it was archived, before the
   job table refused archived keys: ledger.tombstones) leaves too, its rows in the file like the
   others', and keeps the first tombstone (which refuses it): the pass names it and goes on;
4. detaches the partition and empties it (TRUNCATE): whole, never row by row; after the commit,
   its table is dropped in a transaction of its own (see drop_detached).

The pass keeps to a share of the time it runs (RECKON_HISTORY_ARCHIVE_WORK_SHARE, `Pace`): after
each stretch of work it rests, so that on a busy machine the ledger's own work keeps most of it
(on this project's 2-core machine, unpaced, the ledger cycle ran at half its rate during a pass).

A crash before the commit leaves the database as it was (the partition online, no checkpoint)
and at most a file that the next pass writes again with the same content; after the commit
the partition is gone and its checkpoint says where it went (an emptied table left by a crash
before its drop is dropped by the next pass). A partition is archived once.
"""

from __future__ import annotations

import gzip
import logging
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.db import OperationalError, connection, transaction

from ledger import archive, tombstones
from ledger.faults import fault_point
from ledger.models import Attempt, HistoryCheckpoint, Job, JobTombstone, LedgerEvent
from ledger.partitions import EVENTS, Partition, partitions
from ledger.states import FINISHED_JOB

EVENT_COLUMNS = (
    "e.id, e.job_id, j.job_id, e.attempt_id, "
    "to_char(e.at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"+00:00\"'), extract(epoch from e.at)::text, e.actor_type, e.actor, "
    "e.kind, e.\"before\"::text, e.\"after\"::text, e.note, e.evidence::text, e.prev_hash, e.hash"
)
REMOVED_PER_STATEMENT = 2000  # jobs whose rows one DELETE removes: the pass rests between them

log = logging.getLogger("reckon.retention")


class Pace:
    """Keeps a pass to `share` of the time it runs: called often, it rests after each stretch of
    work of at least `stretch` seconds, for (1 / share - 1) times that work. A share of 1 never
    rests."""

    def __init__(self, share: float, *, stretch: float = 0.05, clock: Callable[[], float] = time.monotonic,
                 rest: Callable[[float], None] = time.sleep) -> None:
        self.share, self.stretch, self.clock, self.rest = share, stretch, clock, rest
        self.since = clock()

    def __call__(self) -> None:
        if self.share >= 1:
            return
        worked = self.clock() - self.since
        if worked >= self.stretch:
            self.rest(worked * (1 / self.share - 1))
            self.since = self.clock()


EVENT_KEYS = ("id", "job_pk", "job", "attempt_id", "at", "epoch", "actor_type", "actor", "kind", "before",
              "after", "note", "evidence", "prev_hash", "hash")


def archive_dir() -> Path:
    return Path(settings.RECKON_HISTORY_ARCHIVE_DIR)


def retention_days(tenant: str) -> float:
    return settings.RECKON_HISTORY_RETENTION_BY_TENANT.get(tenant, settings.RECKON_HISTORY_RETENTION_DAYS)


@dataclass
class PassResult:
    archived: list[HistoryCheckpoint] = field(default_factory=list)
    stopped: str = ""  # why the pass stopped before the next expired partition, if it did
    # Jobs archived again without a tombstone of their own (an archived key that ran again), each
    # in a sentence that names it: a person should look at what their second run did.
    archived_again: list[str] = field(default_factory=list)


class NotArchivable(Exception):
    pass


def run_retention_pass(*, now: datetime | None = None, limit: int | None = None) -> PassResult:
    """Archive every expired partition, oldest first, until one is not expired or not archivable."""
    now = now or datetime.now(UTC)
    result = PassResult()
    drop_detached()
    if settings.RECKON_HISTORY_RETENTION_DAYS <= 0:
        result.stopped = "RECKON_HISTORY_RETENTION_DAYS is 0: the history is kept online"
        return result
    for partition in partitions():
        if limit is not None and len(result.archived) >= limit:
            break
        shortest = min([settings.RECKON_HISTORY_RETENTION_DAYS, *settings.RECKON_HISTORY_RETENTION_BY_TENANT.values()])
        if partition.end > now - timedelta(days=shortest):
            result.stopped = f"{partition.name}: online for at least {shortest:g} days after it ends"
            break
        try:
            checkpoint = archive_partition(partition, now=now)
        except NotArchivable as reason:
            result.stopped = f"{partition.name}: {reason}"
            break
        result.archived.append(checkpoint)
        result.archived_again.extend(checkpoint.archived_again)
        for sentence in checkpoint.archived_again:
            log.warning("%s: %s", partition.name, sentence)
    return result


def _tenants_expired(cursor, partition: Partition, now: datetime) -> str:
    cursor.execute(f"SELECT DISTINCT j.tenant FROM \"{partition.name}\" e JOIN ledger_job j ON j.id = e.job_id")  # nosec B608  # a partition name read from pg_class
    for (tenant,) in cursor.fetchall():
        keep = timedelta(days=retention_days(tenant))
        if partition.end + keep > now:
            return f"tenant {tenant} keeps its history {retention_days(tenant):g} days: online until {partition.end + keep:%Y-%m-%d %H:%M} UTC"
    if partition.end + timedelta(days=settings.RECKON_HISTORY_RETENTION_DAYS) > now:
        return f"kept online until {partition.end + timedelta(days=settings.RECKON_HISTORY_RETENTION_DAYS):%Y-%m-%d %H:%M} UTC"
    return ""


def archive_partition(partition: Partition, *, now: datetime) -> HistoryCheckpoint:
    """Archive one partition (the oldest online), as the module says; its checkpoint, whose
    `archived_again` names the jobs that left without a tombstone of their own."""
    if partition.name != partitions()[0].name:
        raise NotArchivable("partitions leave oldest first")
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(hashtext('reckon.retention'))")
        if HistoryCheckpoint.objects.filter(partition=partition.name).exists():
            raise NotArchivable("already archived")  # a table of that name again: never twice
        cursor.execute(f'LOCK TABLE "{partition.name}" IN SHARE MODE')
        waiting = _tenants_expired(cursor, partition, now)
        if waiting:
            raise NotArchivable(waiting)
        cursor.execute(f'SELECT DISTINCT job_id FROM "{partition.name}"')  # nosec B608  # a partition name read from pg_class
        job_pks = sorted(pk for (pk,) in cursor.fetchall())
        jobs = {job.pk: job for job in Job.objects.select_for_update().filter(pk__in=job_pks).order_by("pk")}
        unfinished = [job for job in jobs.values() if job.status not in FINISHED_JOB or job.holder]
        if unfinished:
            job = unfinished[0]
            why = f"held by {job.holder}" if job.holder else job.status
            raise NotArchivable(f"{len(unfinished)} job(s) in it not finished, e.g. {job.job_id} ({why})")
        cursor.execute(f"SELECT DISTINCT job_id FROM {EVENTS} WHERE at >= %s AND job_id = ANY(%s)",  # nosec B608  # fixed table name
                       [partition.end, job_pks])
        going_on = {pk for (pk,) in cursor.fetchall()}
        leaving = [pk for pk in job_pks if pk not in going_on]
        previous = HistoryCheckpoint.objects.order_by("-range_end").first()
        anchors = {job: value for job, value in (previous.carried if previous else {}).items()}

        path = archive_dir() / f"{partition.name}.jsonl.gz"
        pace = Pace(settings.RECKON_HISTORY_ARCHIVE_WORK_SHARE)
        archived_before = _archived_before(cursor, leaving, path)
        pace()
        figures = _write_archive(cursor, partition, path, anchors, going_on, leaving, jobs, pace)
        fault_point("archive_written", partition.name)

        checkpoint = HistoryCheckpoint.objects.create(
            partition=partition.name, range_start=partition.start, range_end=partition.end,
            events=figures["events"], jobs=len(job_pks), first_event_id=figures["first_event_id"],
            last_event_id=figures["last_event_id"], first_hash=figures["first_hash"],
            last_hash=figures["last_hash"], carried=figures["carried_all"], archive_file=str(path),
            archive_sha256=archive.file_sha256(path), archived_at=datetime.now(UTC),
        )
        JobTombstone.objects.bulk_create([
            JobTombstone(job_id=jobs[pk].job_id, idempotency_key=jobs[pk].idempotency_key, tenant=jobs[pk].tenant,
                         action=jobs[pk].action, status=jobs[pk].status, created_at=jobs[pk].created_at,
                         finished_at=jobs[pk].updated_at, checkpoint=checkpoint)
            for pk in leaving if pk not in archived_before
        ])
        checkpoint.archived_again = list(archived_before.values())
        _lock_for_detach(cursor)
        cursor.execute(f'ALTER TABLE {EVENTS} DETACH PARTITION "{partition.name}"')
        # Emptied, not dropped, here: DROP TABLE would take ACCESS EXCLUSIVE on the job and attempt
        # tables (its foreign keys' triggers live there) for the rest of this transaction.
        cursor.execute(f'TRUNCATE "{partition.name}"')
        _remove_jobs(cursor, leaving, pace)
        fault_point("partition_dropped", partition.name)
    drop_detached()
    return checkpoint


def _archived_before(cursor, leaving: list[int], path: Path) -> dict[int, str]:
    """The jobs among `leaving` whose id or key has a tombstone already (the job table's rule,
    ledger.tombstones), by pk, each with the sentence that names it. Only passes write tombstones,
    one at a time (the advisory lock): none appears while this pass runs."""
    cursor.execute(
        f"SELECT j.id, j.job_id, j.status, j.idempotency_key, t.job_id, t.status, t.finished_at, c.archive_file "  # nosec B608  # SQL generated from the models' names
        f"FROM ledger_job j JOIN {tombstones.TOMBSTONES} t ON {tombstones.matching('j')} "
        "JOIN ledger_historycheckpoint c ON c.id = t.checkpoint_id "
        "WHERE j.id = ANY(%s) ORDER BY t.job_id = j.job_id", [leaving])
    again = {}
    for pk, job_id, status, key, tombstone, was, finished, file in cursor.fetchall():  # the id's match last, kept
        matched = "id" if tombstone == job_id else f"key {key}"
        again[pk] = (f"job {job_id} ({status}) ran again after its {matched} was archived (the tombstone of "
                     f"{tombstone}: {was} on {finished.astimezone(UTC):%Y-%m-%d %H:%M} UTC, in {Path(file).name}): "
                     f"archived again in {path.name}, its first tombstone kept")
    return again


def drop_detached() -> list[str]:
    """Drop the archived partitions' emptied tables, each in a transaction of its own that gives
    way (LOCK_WAIT) to the ledger's writers; a table left for now goes on the next pass."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT c.partition FROM ledger_historycheckpoint c WHERE to_regclass(c.partition) IS NOT NULL")
        names = [name for (name,) in cursor.fetchall()]
    dropped = []
    for name in names:
        for _ in range(LOCK_TRIES):
            try:
                with transaction.atomic(), connection.cursor() as cursor:
                    cursor.execute(f"SET LOCAL lock_timeout = '{LOCK_WAIT}'")
                    cursor.execute(f'DROP TABLE "{name}"')
            except OperationalError as refused:
                if getattr(refused.__cause__, "sqlstate", None) != "55P03":
                    raise
                continue
            dropped.append(name)
            break
    return dropped


LOCK_WAIT = "200ms"  # below deadlock_timeout (1 s): the pass gives way before a worker is chosen
LOCK_TRIES = 150


def _lock_for_detach(cursor) -> None:
    """The locks detaching and dropping the partition take (its foreign keys' tables, the event
    table), taken first and together. Writers take them in other orders (a worker: the attempt,
    then the job, then the event table; an enqueue: the job, then the attempt), so waiting for
    them could close a cycle: the pass waits at most LOCK_WAIT each time, lets go and tries again,
    so it is never the cause of a writer's deadlock."""
    for _ in range(LOCK_TRIES):
        try:
            with transaction.atomic():
                cursor.execute(f"SET LOCAL lock_timeout = '{LOCK_WAIT}'")
                cursor.execute("LOCK TABLE ledger_attempt, ledger_job IN SHARE ROW EXCLUSIVE MODE")
                cursor.execute(f"LOCK TABLE {EVENTS} IN ACCESS EXCLUSIVE MODE")
        except OperationalError as refused:
            if getattr(refused.__cause__, "sqlstate", None) != "55P03":  # lock_not_available
                raise
            continue
        cursor.execute("SET LOCAL lock_timeout = 0")
        return
    raise NotArchivable(f"the ledger stayed too busy to detach the partition ({LOCK_TRIES} tries): try again")


def _dependents():
    """(table, column, of) for every table referring to a job or an attempt, but the events."""
    for model, of in ((Job, "job"), (Attempt, "attempt")):
        for relation in model._meta.related_objects:
            if relation.related_model in (LedgerEvent, Attempt) or relation.many_to_many:
                continue
            yield relation.related_model._meta.db_table, relation.field.column, of


def _related_rows(cursor, leaving: list[int]) -> dict[int, dict[str, list]]:
    rows: dict[int, dict[str, list]] = {pk: {} for pk in leaving}
    for table, column, of in _dependents():
        if of == "job":
            sql = f"SELECT t.{column}, row_to_json(t) FROM {table} t WHERE t.{column} = ANY(%s)"  # nosec B608  # names from the models' metadata
        else:
            sql = (f"SELECT a.job_id, row_to_json(t) FROM {table} t JOIN ledger_attempt a ON a.id = t.{column} "  # nosec B608  # names from the models' metadata
                   "WHERE a.job_id = ANY(%s)")
        cursor.execute(sql, [leaving])
        for pk, row in cursor.fetchall():
            rows[pk].setdefault(table, []).append(row)
    return rows


def _remove_jobs(cursor, leaving: list[int], pace: Pace) -> None:
    for start in range(0, len(leaving), REMOVED_PER_STATEMENT):
        some = leaving[start:start + REMOVED_PER_STATEMENT]
        for table, column, of in _dependents():
            if of == "attempt":
                cursor.execute(f"DELETE FROM {table} WHERE {column} IN (SELECT id FROM ledger_attempt WHERE job_id = ANY(%s))",  # nosec B608  # names from the models' metadata
                               [some])
        for table, column, of in _dependents():
            if of == "job":
                cursor.execute(f"DELETE FROM {table} WHERE {column} = ANY(%s)", [some])  # nosec B608  # names from the models' metadata
        cursor.execute("DELETE FROM ledger_attempt WHERE job_id = ANY(%s)", [some])
        cursor.execute("DELETE FROM ledger_job WHERE id = ANY(%s)", [some])
        pace()


def _write_archive(cursor, partition: Partition, path: Path, anchors: dict, going_on: set[int],
                   leaving: list[int], jobs: dict, pace: Pace) -> dict:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    digest = archive.hashlib.sha256()
    first = last = None
    count = 0
    last_hash: dict[str, str] = {}
    with open(partial, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, compresslevel=6) as stream:

        def put(record: dict) -> None:
            data = archive.line(record)
            digest.update(data)
            stream.write(data)
            pace()

        jobs_here = {str(pk) for pk in jobs}
        put({"type": "header", "format": archive.FORMAT, "version": archive.VERSION, "partition": partition.name,
             "range_start": partition.start.isoformat(), "range_end": partition.end.isoformat(),
             "anchors": {job: value for job, value in sorted(anchors.items()) if job in jobs_here}})
        with connection.connection.cursor(name="reckon_archive") as events:
            events.itersize = 5000
            events.execute(f'SELECT {EVENT_COLUMNS} FROM "{partition.name}" e JOIN ledger_job j ON j.id = e.job_id '  # nosec B608  # a partition name read from pg_class
                           "ORDER BY e.id")
            for row in events:
                record = {"type": "event", **dict(zip(EVENT_KEYS, row, strict=True))}
                put(record)
                last_hash[str(record["job_pk"])] = record["hash"]
                first = first or record
                last = record
                count += 1
        related = _related_rows(cursor, leaving)
        attempts = {}
        for attempt in Attempt.objects.filter(job_id__in=leaving).order_by("job_id", "number").values():
            attempts.setdefault(attempt["job_id"], []).append(attempt)
        for pk in leaving:
            job = jobs[pk]
            row = {f.attname: getattr(job, f.attname) for f in Job._meta.concrete_fields}
            put({"type": "job", "row": row, "attempts": attempts.get(pk, []), "related": related[pk]})
        carried_here = {str(pk): last_hash[str(pk)] for pk in sorted(going_on)}
        trailer = {"type": "trailer", "events": count, "jobs": len(jobs),
                   "first_event_id": first["id"] if first else None, "last_event_id": last["id"] if last else None,
                   "first_hash": first["hash"] if first else "", "last_hash": last["hash"] if last else "",
                   "carried": carried_here, "lines_sha256": digest.hexdigest()}
        trailer["seal"] = archive.seal(trailer)  # a file alone cannot be altered and re-sealed
        stream.write(archive.line(trailer))
    with open(partial, "rb") as done:
        os.fsync(done.fileno())
    os.replace(partial, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
    # Jobs carried from earlier archives that have no event here and still go on online.
    leaving_keys = {str(pk) for pk in leaving}
    carried_all = {job: value for job, value in anchors.items() if job not in leaving_keys}
    carried_all.update(carried_here)
    return {**trailer, "carried_all": dict(sorted(carried_all.items(), key=lambda item: int(item[0])))}


def verify_against_checkpoints(path, *, file_only: bool = False, keep_jobs: bool = False) -> archive.Verified:
    """archive.verify, then the file compared with its checkpoint and the one before it."""
    verified = archive.verify(path, keep_jobs=keep_jobs)
    if file_only:
        return verified
    header, trailer = verified.header, verified.trailer
    checkpoint = HistoryCheckpoint.objects.filter(partition=header["partition"]).first()
    if checkpoint is None:
        raise archive.ArchiveInvalid(f"no checkpoint records {header['partition']}: this file never left the "
                                     "database (a pass that stopped before its commit writes it again)")
    period = (archive._time(header["range_start"]), archive._time(header["range_end"]))
    if period != (checkpoint.range_start, checkpoint.range_end):
        raise archive.ArchiveInvalid(f"the file covers {header['range_start']} .. {header['range_end']}, the "
                                     f"checkpoint of {checkpoint.partition} {checkpoint.range_start.isoformat()} .. "
                                     f"{checkpoint.range_end.isoformat()}")
    recorded = {"events": checkpoint.events, "jobs": checkpoint.jobs, "first_event_id": checkpoint.first_event_id,
                "last_event_id": checkpoint.last_event_id, "first_hash": checkpoint.first_hash,
                "last_hash": checkpoint.last_hash}
    for name, value in recorded.items():
        if trailer[name] != value:
            raise archive.ArchiveInvalid(f"the checkpoint says {name} {value!r}, the file {trailer[name]!r}")
    for job, value in trailer["carried"].items():
        if checkpoint.carried.get(job) != value:
            raise archive.ArchiveInvalid(f"job {job} goes on from {value} in the file, from "
                                         f"{checkpoint.carried.get(job)} in the checkpoint")
    previous = HistoryCheckpoint.objects.filter(range_end__lte=checkpoint.range_start).order_by("-range_end").first()
    before = previous.carried if previous else {}
    for job, value in header["anchors"].items():
        if before.get(job) != value:
            raise archive.ArchiveInvalid(f"job {job} follows {value} in the file; the checkpoint before it "
                                         f"left it at {before.get(job)}")
    actual = archive.file_sha256(path)
    if actual != checkpoint.archive_sha256:
        raise archive.ArchiveInvalid(f"the file's sha256 is {actual}, the checkpoint recorded "
                                     f"{checkpoint.archive_sha256}: not the file that was archived")
    verified.against_checkpoint = True
    return verified


RESTORED_SCHEMA = "reckon_restored"
READ_ONLY = f"""CREATE OR REPLACE FUNCTION {RESTORED_SCHEMA}.read_only() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN RAISE EXCEPTION 'restored history is read-only (%)', TG_TABLE_NAME; END $$"""


def restore_archive(path, *, drop: bool = False, file_only: bool = False) -> tuple[str, int, str]:
    """Load a verified archive into read-only tables beside the ledger: (table, events, status).
    Verified against its checkpoint unless `file_only`; the tables' comment says which."""
    # Dropping what was restored needs only the file's name for it; restoring, the whole check.
    verified = None if drop else verify_against_checkpoints(path, file_only=file_only, keep_jobs=True)
    header = verified.header if verified else next(archive.read(path))[1]
    if not re.fullmatch(r"ledger_ledgerevent_[a-z0-9_]{1,40}", str(header.get("partition"))):
        raise archive.ArchiveInvalid(f"the partition name {header.get('partition')!r} is not one Reckon makes")
    table = f"{RESTORED_SCHEMA}.{header['partition']}"
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {table}, {table}_jobs")
        if verified is None:
            return table, 0, "dropped"
        cursor.execute(f"CREATE SCHEMA IF NOT EXISTS {RESTORED_SCHEMA}")
        cursor.execute(READ_ONLY)
        cursor.execute(f"CREATE TABLE {table} (LIKE {EVENTS} INCLUDING DEFAULTS)")
        cursor.execute(f"CREATE TABLE {table}_jobs (job_id text PRIMARY KEY, record jsonb NOT NULL)")
        rows = []
        for _raw, record in archive.read(path):
            if record.get("type") == "event":
                rows.append((record["id"], record["job_pk"], record["attempt_id"], record["at"], record["actor_type"],
                             record["actor"], record["kind"], record["before"], record["after"], record["note"],
                             record["evidence"], record["prev_hash"], record["hash"]))
        cursor.executemany(
            f"INSERT INTO {table} (id, job_id, attempt_id, at, actor_type, actor, kind, \"before\", \"after\", note, "  # nosec B608  # the table name is the verified file's partition name
            "evidence, prev_hash, hash) VALUES (%s, %s, %s, %s, %s, %s, %s, %s::jsonb, %s::jsonb, %s, %s::jsonb, %s, %s)",
            rows)
        cursor.executemany(f"INSERT INTO {table}_jobs VALUES (%s, %s::jsonb)",  # nosec B608  # as above
                           [(job["row"]["job_id"], archive.json.dumps(job, default=str)) for job in verified.jobs])
        for name in (table, f"{table}_jobs"):
            cursor.execute(f"COMMENT ON TABLE {name} IS %s", [f"restored from {path}: {verified.status}"])
            cursor.execute(f"CREATE TRIGGER read_only BEFORE INSERT OR UPDATE OR DELETE ON {name} "
                           f"FOR EACH ROW EXECUTE FUNCTION {RESTORED_SCHEMA}.read_only()")
            cursor.execute(f"CREATE TRIGGER read_only_truncate BEFORE TRUNCATE ON {name} "
                           f"FOR EACH STATEMENT EXECUTE FUNCTION {RESTORED_SCHEMA}.read_only()")
    return table, len(rows), verified.status
