"""Issue 28: the history partitioned by time, retained by policy, archived verifiably, and an
archived key never run again. Real PostgreSQL partitions, small: each test lays out its own (one
from an hour ago; `cut_here` ends the latest at this moment and starts the next), so the work it
does lands in partitions it can expire by passing a later `now` to the retention pass."""

from __future__ import annotations

import gzip
import itertools
import json
import os
import signal
import sys
from datetime import timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.core.management import CommandError, call_command
from django.db import DatabaseError, connection, transaction

from config.schedules import SCHEDULES
from ledger import services
from ledger.invariants import find_violations
from ledger.models import HistoryCheckpoint, Job, JobTombstone, LedgerEvent
from ledger.partitions import EVENTS, covered_until, ensure, ensure_ahead, partitions
from ledger.services.retention import run_retention_pass
from ledger.tasks import create_partitions_ahead
from tests.conftest import expire_lease, make_job
from tests.processes import ROOT, ManagedProcess, database_url_of_tests, wait_for


def fresh_layout() -> None:
    """Drop the (empty) partitions; one from an hour ago on holds what the test writes."""
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        for partition in partitions():
            cursor.execute(f'DROP TABLE "{partition.name}"')
        cursor.execute("SELECT clock_timestamp() - interval '1 hour'")
        (start,) = cursor.fetchone()
        cursor.execute(f"CREATE TABLE {EVENTS}_t0 PARTITION OF {EVENTS} FOR VALUES FROM (%s) TO (%s)",
                       [start, start + timedelta(days=3650)])


def cut_here():
    """End the latest partition now (re-attached with its rows); the next one starts here."""
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # deferred FK checks first, or ALTER refuses
        cursor.execute("SELECT clock_timestamp()")
        (moment,) = cursor.fetchone()
        existing = partitions()
        last = existing[-1]
        cursor.execute(f'ALTER TABLE {EVENTS} DETACH PARTITION "{last.name}"')
        cursor.execute(f'ALTER TABLE {EVENTS} ATTACH PARTITION "{last.name}" FOR VALUES FROM (%s) TO (%s)',
                       [last.start, moment])
        taken = {partition.name for partition in existing}  # after a pass, fewer than the names given
        name = next(f"{EVENTS}_t{n}" for n in itertools.count(len(existing)) if f"{EVENTS}_t{n}" not in taken)
        cursor.execute(f"CREATE TABLE {name} PARTITION OF {EVENTS} FOR VALUES FROM (%s) TO (%s)", [moment, last.end])
    return moment


def _db_now():
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        return cursor.fetchone()[0]


def finish(job_id: str, tenant: str = "acme") -> Job:
    make_job(job_id, tenant=tenant)
    lease = services.claim_job(job_id=job_id, worker="w")
    services.begin_side_effect(lease=lease)
    services.record_success(lease=lease, result_ref=f"r-{job_id}")
    return Job.objects.get(job_id=job_id)


def retention_pass(after):
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
    return run_retention_pass(now=after + timedelta(days=1, seconds=1))


def broken() -> dict[str, int]:
    return {f.check: f.count for f in find_violations() if f.count}


@pytest.fixture
def archive_dir(settings, tmp_path):
    settings.RECKON_HISTORY_ARCHIVE_DIR = str(tmp_path / "archive")
    settings.RECKON_HISTORY_RETENTION_DAYS = 1.0
    settings.RECKON_HISTORY_RETENTION_BY_TENANT = {}
    return tmp_path / "archive"


@pytest.mark.django_db
def test_partitions_are_created_ahead_once_and_hold_the_present(settings):
    settings.RECKON_HISTORY_PARTITION_DAYS = 2
    settings.RECKON_HISTORY_PARTITIONS_AHEAD = 3
    fresh_layout()
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute(f'DROP TABLE "{EVENTS}_t0"')
    assert any(schedule.task is create_partitions_ahead for schedule in SCHEDULES)  # the cluster runs it
    assert create_partitions_ahead() == 4  # the present's partition and three ahead
    assert ensure_ahead() == []  # the second time: nothing to do
    until = covered_until()
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        (now,) = cursor.fetchone()
    assert now + timedelta(days=6) <= until <= now + timedelta(days=8)
    bounds = partitions()
    assert all(a.end == b.start for a, b in zip(bounds, bounds[1:], strict=False))  # no gap, no overlap
    # A gap in the past is filled up to the first partition, never over it.
    assert ensure(bounds[0].start - timedelta(days=3), bounds[0].start + timedelta(days=1))
    assert partitions()[1].end == bounds[0].start == partitions()[2].start
    finish("now")  # written into the present's partition
    assert LedgerEvent.objects.filter(job__job_id="now").count() == 4


@pytest.mark.django_db
def test_the_history_stays_append_only_in_every_partition():
    fresh_layout()
    finish("ok")
    with pytest.raises(DatabaseError, match="Cannot update or delete"), transaction.atomic():
        LedgerEvent.objects.filter(job__job_id="ok").update(note="rewritten")
    with pytest.raises(DatabaseError, match="Cannot update or delete"), transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(f"DELETE FROM {EVENTS}_t0")
    assert broken() == {}


@pytest.mark.django_db
def test_a_retention_pass_archives_an_expired_partition_whole(archive_dir):
    fresh_layout()
    done = finish("done")
    spans = finish("spans")
    cut_here()
    comment = services.comment_on_job(job_id="spans", author="ann", actor_type="operator", text="still true")
    make_job("open")  # pending, in the next partition: that one stays
    later = cut_here()

    result = retention_pass(later)

    assert [c.partition for c in result.archived] == [f"{EVENTS}_t0"]
    assert "open" in result.stopped and "pending" in result.stopped
    assert [p.name for p in partitions()] == [f"{EVENTS}_t1", f"{EVENTS}_t2"]
    checkpoint = HistoryCheckpoint.objects.get()
    assert (checkpoint.events, checkpoint.jobs) == (8, 2)
    # "done" left with its whole history: a tombstone stays, its rows went (into the file).
    assert not Job.objects.filter(job_id="done").exists()
    tombstone = JobTombstone.objects.get(job_id="done")
    assert (tombstone.status, tombstone.idempotency_key, tombstone.checkpoint) == ("succeeded", done.idempotency_key,
                                                                                 checkpoint)
    # "spans" goes on online: its first online event follows the hash the checkpoint carries.
    comment.refresh_from_db()
    assert checkpoint.carried == {str(spans.pk): comment.prev_hash}
    assert Job.objects.filter(job_id="spans").exists() and not JobTombstone.objects.filter(job_id="spans").exists()
    assert broken() == {}  # ledger_check verifies the online history from the checkpoint
    call_command("ledger_check", stdout=(out := StringIO()))
    assert f"1 period(s) archived, the chains verified from the checkpoint of {EVENTS}_t0 (1 job(s) carried on)" \
        in out.getvalue()
    path = Path(checkpoint.archive_file)
    assert path.parent == archive_dir and path.name == f"{EVENTS}_t0.jsonl.gz"
    call_command("verify_archive", str(path))
    # Nothing left to do until the next partition expires; never twice, and never made again.
    assert retention_pass(later).archived == []
    assert ensure(checkpoint.range_start, checkpoint.range_end) == []
    assert HistoryCheckpoint.objects.count() == 1


@pytest.mark.django_db
def test_an_archived_key_never_runs_again(archive_dir):
    fresh_layout()
    finish("paid-once")
    later = cut_here()
    retention_pass(later)
    events = LedgerEvent.objects.count()

    with pytest.raises(services.JobArchived, match=rf"'paid-once' succeeded on .* archived on .* in {EVENTS}_t0\.jsonl\.gz: a job id is never"):
        make_job("paid-once")

    assert not Job.objects.filter(job_id="paid-once").exists()
    assert LedgerEvent.objects.count() == events  # refused: the ledger unchanged
    make_job("paid-twice")  # another key is welcome


def _sql(statement: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # deferred checks first, or ALTER TABLE refuses
        cursor.execute(statement)


@pytest.mark.django_db
def test_a_job_that_ran_again_after_its_key_was_archived_is_named_archived_again_and_the_pass_goes_on(
        archive_dir, caplog, settings):
    """Issue 40: before the job table refused archived keys, the gateway's one-statement enqueue ran
    one again, and the next pass failed for good on its duplicate tombstone. Now the pass names the
    job, archives its second run with the others (its rows in the file) and keeps the first
    tombstone, which refuses the key; ledger_check holds again."""
    fresh_layout()
    finish("twice")
    first = retention_pass(cut_here()).archived[0]
    _sql("ALTER TABLE ledger_job DISABLE TRIGGER reckon_job_not_archived_insert")  # the defect, as it was
    finish("twice")
    _sql("ALTER TABLE ledger_job ENABLE TRIGGER reckon_job_not_archived_insert")
    finish("once")
    assert broken() == {"job_with_tombstone": 1}
    cut = cut_here()
    settings.RECKON_HISTORY_RETENTION_DAYS = 0.0000001  # what ended a moment ago has expired
    wait_for(lambda: _db_now() > cut + timedelta(days=0.0000001), timeout=10,  # a fast run came within it
             message="the database's clock to pass the retention bound")

    call_command("archive_history", stdout=(out := StringIO()))

    second = HistoryCheckpoint.objects.get(partition=f"{EVENTS}_t1")
    said = (f"job twice (succeeded) ran again after its id was archived (the tombstone of twice: succeeded on "
            f"{JobTombstone.objects.get(job_id='twice').finished_at:%Y-%m-%d %H:%M} UTC, in {EVENTS}_t0.jsonl.gz): "
            f"archived again in {EVENTS}_t1.jsonl.gz, its first tombstone kept")
    assert f"archived {EVENTS}_t1: 8 events of 2 jobs, 1 jobs left the database (and 1 archived again)" in out.getvalue()
    assert f"  {said}" in out.getvalue()
    assert [record.getMessage() for record in caplog.records if record.name == "reckon.retention"] == [
        f"{EVENTS}_t1: {said}"]
    assert dict(JobTombstone.objects.values_list("job_id", "checkpoint")) == {"twice": first.pk, "once": second.pk}
    assert not Job.objects.exists() and broken() == {}
    call_command("verify_archive", second.archive_file)
    jobs = [record["row"]["job_id"] for record in map(json.loads, gzip.open(second.archive_file)) if
            record["type"] == "job"]
    assert sorted(jobs) == ["once", "twice"]  # the second run's rows, kept in its file
    with pytest.raises(services.JobArchived, match="job 'twice' succeeded"):
        make_job("twice")


@pytest.mark.django_db
@pytest.mark.parametrize("unfinished", ["unknown", "held", "pending"])
def test_a_partition_with_unfinished_work_stays_online(archive_dir, unfinished):
    fresh_layout()
    finish("done")
    if unfinished == "unknown":
        make_job("x")
        lease = services.claim_job(job_id="x", worker="w")
        services.begin_side_effect(lease=lease)
        expire_lease("x")
        services.sweep_expired_leases()
    elif unfinished == "held":
        make_job("x")
        services.take_job(job_id="x", holder="ann")
    else:
        make_job("x")
    later = cut_here()
    events = LedgerEvent.objects.count()

    result = retention_pass(later)

    assert result.archived == [] and "e.g. x" in result.stopped
    assert ("held by ann" in result.stopped) == (unfinished == "held")
    assert LedgerEvent.objects.count() == events and JobTombstone.objects.count() == 0
    assert not any(archive_dir.glob("*.jsonl.gz")) if archive_dir.exists() else True


@pytest.mark.django_db
def test_a_tenant_with_a_longer_retention_holds_its_partitions(archive_dir, settings):
    settings.RECKON_HISTORY_RETENTION_BY_TENANT = {"bank": 30.0}
    fresh_layout()
    finish("a", tenant="acme")
    finish("b", tenant="bank")
    later = cut_here()
    assert "tenant bank keeps its history 30 days" in retention_pass(later).stopped
    assert run_retention_pass(now=later + timedelta(days=31)).archived


def _rewrite(path: Path, change) -> None:
    lines = [json.loads(raw) for raw in gzip.open(path, "rb")]
    change(lines)
    with gzip.open(path, "wb") as stream:
        for record in lines:
            stream.write((json.dumps(record, separators=(",", ":")) + "\n").encode())


@pytest.mark.django_db
def test_verify_archive_finds_an_altered_event_a_cut_file_and_a_swapped_file(archive_dir, tmp_path):
    fresh_layout()
    finish("a")
    finish("b")
    path = Path(retention_pass(cut_here()).archived[0].archive_file)
    original = path.read_bytes()

    def alter(lines):
        lines[3]["note"] = "nothing happened"

    _rewrite(path, alter)
    with pytest.raises(CommandError, match="does not hash to its recorded hash"):
        call_command("verify_archive", str(path), "--file-only")

    path.write_bytes(original)
    _rewrite(path, lambda lines: lines.pop())
    with pytest.raises(CommandError, match="without a trailer"):
        call_command("verify_archive", str(path))

    path.write_bytes(original)
    _rewrite(path, lambda lines: None)  # the same records, another file (its bytes differ)
    call_command("verify_archive", str(path), "--file-only")
    with pytest.raises(CommandError, match="not the file that was archived"):
        call_command("verify_archive", str(path))

    path.write_bytes(original)
    call_command("verify_archive", str(path))


@pytest.mark.django_db
def test_restore_archive_brings_a_period_back_read_only(archive_dir):
    fresh_layout()
    finish("a")
    path = retention_pass(cut_here()).archived[0].archive_file
    call_command("restore_archive", path)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT kind FROM reckon_restored.{EVENTS}_t0 ORDER BY id")
        assert [kind for (kind,) in cursor.fetchall()] == ["enqueued", "claimed", "side_effect_started", "succeeded"]
        cursor.execute(f"SELECT record->'row'->>'status' FROM reckon_restored.{EVENTS}_t0_jobs WHERE job_id = 'a'")
        assert cursor.fetchone() == ("succeeded",)
        with pytest.raises(DatabaseError, match="read-only"), transaction.atomic():
            cursor.execute(f"UPDATE reckon_restored.{EVENTS}_t0 SET note = 'x'")
    assert LedgerEvent.objects.count() == 0  # the live ledger untouched


@pytest.fixture
def standard_partitions_afterwards(transactional_db):
    yield
    restore_standard_partitions()


def restore_standard_partitions() -> None:
    """After a test that committed its own layout: the partitions every other test expects."""
    with connection.cursor() as cursor:
        for partition in partitions():
            cursor.execute(f'DROP TABLE "{partition.name}"')
        # The test's checkpoints go too (the flush after it would empty them, but only after this):
        # an archived period is never made again, and the tests after this one write events now.
        cursor.execute("TRUNCATE ledger_historycheckpoint, ledger_jobtombstone")
        cursor.execute("SELECT now() - interval '1 day'")
        (start,) = cursor.fetchone()
    ensure(start, start + timedelta(days=2))
    ensure_ahead()


def _archive_history(env: dict) -> ManagedProcess:
    return ManagedProcess([sys.executable, str(ROOT / "manage.py"), "archive_history"],
                          env={"DATABASE_URL": database_url_of_tests(), **env}, log_name="archive_history").start()


@pytest.mark.parametrize("point", ["archive_written", "partition_dropped"])
def test_a_retention_pass_killed_midway_loses_nothing_and_archives_once(standard_partitions_afterwards, tmp_path,
                                                                        point):
    fresh_layout()
    finish("a")
    finish("b")
    cut_here()
    events = sorted(LedgerEvent.objects.values_list("id", "hash"))
    env = {"RECKON_HISTORY_ARCHIVE_DIR": str(tmp_path / "archive"), "RECKON_HISTORY_RETENTION_DAYS": "0.0000001"}

    killed = _archive_history({**env, "RECKON_FAULT_POINT": point, "RECKON_FAULT_DIR": str(tmp_path / "faults"),
                               "RECKON_FAULT_JOBS": f"{EVENTS}_t0"})
    fired = tmp_path / "faults" / f"{EVENTS}_t0.{point}"
    wait_for(fired.exists, timeout=60, message=f"the pass to reach {point}")
    os.kill(killed.pid, signal.SIGKILL)  # the process stopped itself at the point; now it dies there
    killed.process.wait(timeout=30)
    killed.stop()

    # Nothing happened: the partition, its events, the jobs, no checkpoint, no tombstone.
    assert f"{EVENTS}_t0" in [p.name for p in partitions()]
    assert sorted(LedgerEvent.objects.values_list("id", "hash")) == events
    assert (HistoryCheckpoint.objects.count(), JobTombstone.objects.count(), Job.objects.count()) == (0, 0, 2)
    assert broken() == {}

    again = _archive_history(env)
    assert again.process.wait(timeout=120) == 0, again.output()
    again.stop()
    once_more = _archive_history(env)
    assert once_more.process.wait(timeout=120) == 0, once_more.output()
    once_more.stop()

    checkpoint = HistoryCheckpoint.objects.get()  # archived once
    assert checkpoint.partition == f"{EVENTS}_t0" and checkpoint.events == len(events)
    assert sorted(JobTombstone.objects.values_list("job_id", flat=True)) == ["a", "b"]
    assert list(Path(tmp_path / "archive").iterdir()) == [Path(checkpoint.archive_file)]  # no leftover partial
    call_command("verify_archive", checkpoint.archive_file)
    assert broken() == {}


def test_a_retention_pass_gives_way_to_a_writer_and_then_archives(standard_partitions_afterwards, settings,
                                                                  tmp_path):
    """A writer holding the attempt table (as a worker's step does) while the pass wants to detach:
    the pass waits in short turns, never blocking the writer into a deadlock, and archives after."""
    import threading

    import psycopg

    settings.RECKON_HISTORY_ARCHIVE_DIR = str(tmp_path)
    settings.RECKON_HISTORY_RETENTION_DAYS = 1.0
    fresh_layout()
    finish("a")
    later = cut_here()
    writer = psycopg.connect(database_url_of_tests())
    writer.execute("LOCK TABLE ledger_attempt IN ROW EXCLUSIVE MODE")  # its transaction stays open
    outcome = {}

    def retention():
        try:
            outcome["result"] = run_retention_pass(now=later + timedelta(days=1, seconds=1))
        finally:
            connection.close()

    passing = threading.Thread(target=retention)
    passing.start()

    def the_pass_waits_for_the_writer():
        (waiting,) = writer.execute("SELECT count(*) FROM pg_locks WHERE NOT granted AND "
                                    "relation = 'ledger_attempt'::regclass").fetchone()
        return waiting

    wait_for(the_pass_waits_for_the_writer, timeout=30, message="the pass to wait for the attempt table")
    # The writer goes on to the job table, as a worker's step does: with the pass holding it while
    # waiting for the attempts, that would close a deadlock (and one of the two would fail).
    writer.execute("LOCK TABLE ledger_job IN ROW EXCLUSIVE MODE")
    writer.commit()
    writer.close()
    passing.join(timeout=60)
    assert [c.partition for c in outcome["result"].archived] == [f"{EVENTS}_t0"]
    assert JobTombstone.objects.filter(job_id="a").exists() and broken() == {}


@pytest.mark.parametrize("step", ["claim", "succeed"])
def test_a_step_that_waited_for_the_jobs_lock_stamps_its_event_after_it(transactional_db, step):
    """The worker steps' functions lock the job inside one statement: the event's time is taken
    after the lock (migration 0022), not at the statement's start, so a job's events stay in time
    order in id order and its chain never goes back across a partition's boundary."""
    import threading

    import psycopg

    make_job("locked")
    lease = None
    if step == "succeed":
        lease = services.claim_job(job_id="locked", worker="w")
        services.begin_side_effect(lease=lease)
    holder = psycopg.connect(database_url_of_tests())
    holder.execute("SELECT 1 FROM ledger_job WHERE job_id = 'locked' FOR UPDATE")  # its transaction stays open
    outcome = {}

    def the_step():
        try:
            outcome["done"] = (services.claim_job(job_id="locked", worker="w") if step == "claim"
                               else services.record_success(lease=lease, result_ref="r"))
        finally:
            connection.close()

    stepping = threading.Thread(target=the_step)
    stepping.start()

    def the_step_waits_for_the_lock():
        (waiting,) = holder.execute("SELECT count(*) FROM pg_locks WHERE NOT granted AND locktype = 'transactionid' "
                                    "OR NOT granted AND relation = 'ledger_job'::regclass").fetchone()
        return waiting

    wait_for(the_step_waits_for_the_lock, timeout=30, message="the step to wait for the job's lock")
    (released,) = holder.execute("SELECT clock_timestamp()").fetchone()
    holder.commit()
    holder.close()
    stepping.join(timeout=60)
    assert outcome.get("done") is not None
    kind = "claimed" if step == "claim" else "succeeded"
    event = LedgerEvent.objects.get(job__job_id="locked", kind=kind)
    assert event.at > released, (event.at, released)  # the statement began before: its start is not the stamp
    times = list(LedgerEvent.objects.filter(job__job_id="locked").order_by("id").values_list("at", flat=True))
    assert times == sorted(times) and broken() == {}


def test_a_pass_rests_to_keep_to_its_share_of_the_time():
    """RECKON_HISTORY_ARCHIVE_WORK_SHARE: after each stretch of work, a rest of (1 / share - 1) times
    it; between stretches, nothing."""
    from ledger.services.retention import Pace

    now, rests = [0.0], []

    def rest(seconds: float) -> None:
        rests.append(seconds)
        now[0] += seconds

    pace = Pace(0.25, stretch=0.05, clock=lambda: now[0], rest=rest)
    for worked in (0.01, 0.02, 0.03, 0.2):  # 60 ms of work, then 200 ms
        now[0] += worked
        pace()
    assert rests == [pytest.approx(0.18), pytest.approx(0.6)]
    assert sum(rests) == pytest.approx(0.78)
    never = Pace(1.0, clock=lambda: now[0], rest=rest)
    now[0] += 5
    never()
    assert len(rests) == 2


def test_the_work_share_is_a_fraction():
    from config.env import Share

    assert Share("RECKON_HISTORY_ARCHIVE_WORK_SHARE", "0.5") == 0.5
    for wrong in ("0", "1.5", "-1", "half"):
        with pytest.raises(ValueError, match="RECKON_HISTORY_ARCHIVE_WORK_SHARE"):
            Share("RECKON_HISTORY_ARCHIVE_WORK_SHARE", wrong)


# Issue 42, finding 5: what the review forged. A forger holds the file, not the secret key: each
# forgery is "repaired" as well as a file alone allows (event hashes and chains recomputed, the
# trailer's figures and lines_sha256 too) and re-sealed under a key of the forger's own.
FORGER_KEY = "a-forgers-own-key-not-the-deployments-0123456789abcdef"


def _forge(path: Path, change, *, key: str | None = FORGER_KEY) -> None:
    """Apply `change` to the records, then repair all a file alone lets a forger repair."""
    from decimal import Decimal

    from ledger import archive

    records = [json.loads(raw) for raw in gzip.open(path, "rb")]
    change(records)
    header, body, trailer = records[0], records[1:-1], records[-1]
    chains = dict(header.get("anchors") or {})
    events = [record for record in body if record["type"] == "event"]
    for event in events:
        if not archive._same_moment(event["at"], event["epoch"]):  # a moved time: its chained one too
            moment = archive._time(event["at"]) - archive.datetime(1970, 1, 1, tzinfo=archive.UTC)
            event["epoch"] = str(Decimal(moment // archive.timedelta(microseconds=1)) / 1_000_000)
        event["prev_hash"] = chains.get(str(event["job_pk"]), "")
        event["hash"] = chains[str(event["job_pk"])] = archive.event_hash(event)
    lines = [archive.line(record) for record in [header, *body]]
    trailer.update(events=len(events), first_event_id=events[0]["id"] if events else None,
                   last_event_id=events[-1]["id"] if events else None,
                   first_hash=events[0]["hash"] if events else "", last_hash=events[-1]["hash"] if events else "",
                   carried={job: chains[job] for job in trailer["carried"] if job in chains},
                   lines_sha256=archive.hashlib.sha256(b"".join(lines)).hexdigest())
    trailer.pop("seal", None)
    if key is not None:
        trailer["seal"] = archive.seal(trailer, secret=key)
    with gzip.open(path, "wb") as stream:
        stream.write(b"".join([*lines, archive.line(trailer)]))


def _events(records):
    return [record for record in records if record["type"] == "event"]


def _job_records(records):
    return [record for record in records if record["type"] == "job"]


def _rewrite_job(records):
    _job_records(records)[0]["row"]["status"] = "failed"


def _move_time(records):
    _events(records)[1]["at"] = "2001-01-01T00:00:00.000000+00:00"


def _cut_tail(records):
    last = _events(records)[-1]
    records[:] = [r for r in records if r.get("job_pk") != last["job_pk"] and
                  (r["type"] != "job" or r["row"]["id"] != last["job_pk"])]


def _drop_event(records):
    records.remove(_events(records)[2])


def _reorder(records):
    events = _events(records)
    i, j = records.index(events[0]), records.index(events[-1])
    records[i], records[j] = records[j], records[i]


def _change_payload(records):
    _job_records(records)[0]["row"]["payload"] = {"amount": 1}
    _events(records)[0]["after"] = _events(records)[0]["after"].replace("pending", "succeeded")


def _change_trailer(records):
    records[-1]["jobs"] = 1


def _reseal_a_note(records):
    _events(records)[3]["note"] = "nothing happened"


FORGERIES = {
    "a rewritten job record": _rewrite_job,
    "a moved event time": _move_time,
    "a cut tail": _cut_tail,
    "a dropped event": _drop_event,
    "a reordered event": _reorder,
    "a changed payload": _change_payload,
    "a changed trailer": _change_trailer,
    "a re-sealed file": _reseal_a_note,
}


def _restored_tables() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = 'reckon_restored'")
        return sorted(name for (name,) in cursor.fetchall())


@pytest.mark.django_db
@pytest.mark.parametrize("forgery", FORGERIES, ids=list(FORGERIES))
def test_a_forged_archive_is_neither_verified_nor_restored_even_alone(archive_dir, forgery):
    fresh_layout()
    finish("a")
    finish("b")
    path = Path(retention_pass(cut_here()).archived[0].archive_file)

    _forge(path, FORGERIES[forgery])

    for file_only in ([], ["--file-only"]):
        with pytest.raises(CommandError, match="does not verify"):
            call_command("verify_archive", str(path), *file_only)
        with pytest.raises(CommandError, match="not restored"):
            call_command("restore_archive", str(path), *file_only)
    assert _restored_tables() == []  # refused: nothing restored
    assert LedgerEvent.objects.count() == 0 and not Job.objects.filter(job_id__in=["a", "b"]).exists()


@pytest.mark.django_db
def test_a_file_of_another_checkpoint_is_refused(archive_dir):
    fresh_layout()
    finish("a")
    first = Path(retention_pass(cut_here()).archived[0].archive_file)
    finish("b")
    second = retention_pass(cut_here()).archived[0]

    def claim_the_second(records):
        records[0]["partition"] = second.partition

    _forge(first, claim_the_second)
    with pytest.raises(CommandError, match="does not verify: the trailer's seal does not match"):
        call_command("verify_archive", str(first))
    with pytest.raises(CommandError, match="not restored: the trailer's seal does not match"):
        call_command("restore_archive", str(first), "--file-only")
    with pytest.raises(CommandError, match="not restored"):
        call_command("restore_archive", str(first))
    assert _restored_tables() == []


@pytest.mark.django_db
def test_an_archive_is_sealed_and_restored_against_its_checkpoint_and_says_so(archive_dir):
    fresh_layout()
    finish("a")
    path = retention_pass(cut_here()).archived[0].archive_file

    call_command("verify_archive", path, stdout=(out := StringIO()))
    assert "sealed, verified against its checkpoint" in out.getvalue()
    call_command("restore_archive", path, stdout=(out := StringIO()))
    assert "sealed, verified against its checkpoint" in out.getvalue()
    call_command("restore_archive", path, "--file-only", stdout=(out := StringIO()))
    assert "verified against the file alone (not against its checkpoint)" in out.getvalue()
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT obj_description('reckon_restored.{EVENTS}_t0'::regclass)")
        assert "verified against the file alone" in cursor.fetchone()[0]
    # Re-sealed under the deployment's own key (a forger who has it): the checkpoint still holds.
    _forge(Path(path), _rewrite_job, key=django_settings.SECRET_KEY)
    call_command("verify_archive", path, "--file-only")
    with pytest.raises(CommandError, match="not restored: the file's sha256 .* not the file that was archived"):
        call_command("restore_archive", path)


@pytest.mark.django_db
def test_an_archive_written_before_sealing_still_verifies_and_restores_and_says_unsealed(archive_dir):
    from ledger import archive

    fresh_layout()
    finish("a")
    checkpoint = retention_pass(cut_here()).archived[0]
    path = Path(checkpoint.archive_file)

    def as_written_before_sealing(records):
        records[0]["version"] = archive.UNSEALED_VERSION

    _forge(path, as_written_before_sealing, key=None)  # today's writer: version 1, no seal
    with connection.cursor() as cursor:  # test setup: the checkpoint today's writer recorded for it
        cursor.execute("ALTER TABLE ledger_historycheckpoint DISABLE TRIGGER USER")
        cursor.execute("UPDATE ledger_historycheckpoint SET archive_sha256 = %s", [archive.file_sha256(path)])
        cursor.execute("ALTER TABLE ledger_historycheckpoint ENABLE TRIGGER USER")

    call_command("verify_archive", str(path), stdout=(out := StringIO()))
    assert "unsealed, written before sealing, verified against its checkpoint" in out.getvalue()
    call_command("restore_archive", str(path), stdout=(out := StringIO()))
    assert "unsealed, written before sealing" in out.getvalue()
    original = path.read_bytes()

    def move_a_time_alone(records):  # the chained epoch left as it was: checked even unsealed
        records[2]["at"] = records[2]["at"][:-9] + "999999+00:00"

    records = [json.loads(raw) for raw in gzip.open(path, "rb")]
    move_a_time_alone(records)
    with gzip.open(path, "wb") as stream:
        stream.write(b"".join(archive.line(record) for record in records))
    with pytest.raises(CommandError, match="its chained time .* says otherwise"):
        call_command("verify_archive", str(path), "--file-only")
    path.write_bytes(original)
    # Unsealed, a repaired forgery passes alone (anyone can recompute its hashes): the checkpoint holds.
    _forge(path, _rewrite_job, key=None)
    call_command("verify_archive", str(path), "--file-only")
    with pytest.raises(CommandError, match="not restored: the file's sha256"):
        call_command("restore_archive", str(path))
