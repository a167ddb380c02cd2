"""An archived job's id is never run again, whichever path inserts the job (issue 40): the job
table's trigger (ledger/tombstones.py) is the one generated from the models, installed as the
latest migration froze it, refuses every path with SQLSTATE 23R01 (JobArchived in Python), and
holds against a retention pass committing while the insert waits for it, on real connections."""

from __future__ import annotations

import os
import re
import signal
import sys
import threading
from datetime import UTC, datetime

import psycopg
import pytest
from django.db import IntegrityError, connection, transaction
from django.db.migrations.loader import MigrationLoader
from django.test.utils import CaptureQueriesContext

from ledger import services, tombstones
from ledger.models import HistoryCheckpoint, Job, JobTombstone
from tests.conftest import make_job
from tests.ledger.test_fast_path import _ledger_rows, _normalised, _sql_statements
from tests.ledger.test_history_retention import cut_here, finish, fresh_layout, restore_standard_partitions
from tests.processes import ROOT, ManagedProcess, database_url_of_tests, wait_for

JOB = {"tenant": "acme", "action": "reckon.echo", "payload": {"n": 1}}
ARCHIVED_AT = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)


def archived(job_id: str, *, key: str | None = None, status: str = "succeeded") -> JobTombstone:
    """A tombstone as a retention pass leaves it (its checkpoint too), for a job no longer online."""
    checkpoint = HistoryCheckpoint.objects.create(
        partition=f"ledger_ledgerevent_gone_{HistoryCheckpoint.objects.count()}", range_start=ARCHIVED_AT,
        range_end=ARCHIVED_AT, events=4, jobs=1, archive_file="/archive/ledger_ledgerevent_gone.jsonl.gz",
        archive_sha256="0" * 64, archived_at=ARCHIVED_AT)
    return JobTombstone.objects.create(job_id=job_id, idempotency_key=key or f"reckon.echo:{job_id}", tenant="acme",
                                       action="reckon.echo", status=status, created_at=ARCHIVED_AT,
                                       finished_at=ARCHIVED_AT, checkpoint=checkpoint)


# -- the trigger in the database is the generated one ----------------------------------------------


def _migration_to_write() -> str:
    (_, leaf), = MigrationLoader(None, ignore_no_migrations=True).graph.leaf_nodes("ledger")
    return (f"write migration ledger/migrations/{int(leaf[:4]) + 1:04d}_….py (after {leaf}) with the text of "
            "ledger.tombstones.install_sql() frozen into it (a migration never imports the generator)")


def _frozen_in_migrations() -> dict[str, str]:
    """The function's and each trigger's text as the last migration (in the order they apply) froze it."""
    loader = MigrationLoader(None, ignore_no_migrations=True)
    (leaf,) = loader.graph.leaf_nodes("ledger")
    frozen = {}
    for key in loader.graph.forwards_plan(leaf):
        for statement in _sql_statements(loader.graph.nodes[key].operations):
            created = re.search(rf"CREATE (?:OR REPLACE )?(?:FUNCTION|TRIGGER) ({tombstones.FUNCTION}\w*)", statement)
            if created:
                frozen[created[1]] = statement
    return frozen


def _generated() -> dict[str, str]:
    return {re.search(r"(?:FUNCTION|TRIGGER) (\w+)", sql)[1]: sql for sql in tombstones.install_sql()}


def test_the_latest_migration_freezes_the_generated_trigger():
    frozen = _frozen_in_migrations()
    drift = [name for name, sql in _generated().items() if _normalised(frozen.get(name, "")) != _normalised(sql)]
    assert drift == [], f"{drift}: ledger/tombstones.py generates other SQL; {_migration_to_write()}"


def _trigger_definitions(names) -> dict[str, tuple[str, str]]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT tgname, pg_get_triggerdef(oid), tgenabled FROM pg_trigger "
                       "WHERE tgrelid = %s::regclass AND tgname = ANY(%s)", [tombstones.JOBS, list(names)])
        return {name: (definition, enabled) for name, definition, enabled in cursor.fetchall()}


@pytest.mark.django_db
def test_the_installed_function_and_triggers_are_the_generated_ones():
    generated = _generated()
    with connection.cursor() as cursor:
        cursor.execute("SELECT prosrc FROM pg_proc WHERE proname = %s", [tombstones.FUNCTION])
        (installed,) = cursor.fetchone()
        assert _normalised(installed) == _normalised(generated[tombstones.FUNCTION].split("$$")[1])
        # Each generated trigger, created beside the installed one under another name, is defined alike.
        triggers = [name for name in generated if name != tombstones.FUNCTION]
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # the test's deferred checks first, or DDL refuses
        for name in triggers:
            cursor.execute(generated[name].replace(f"TRIGGER {name} ", f"TRIGGER {name}_probe ", 1))
        definitions = _trigger_definitions([*triggers, *(f"{name}_probe" for name in triggers)])
    for name in triggers:
        probe, enabled = definitions[f"{name}_probe"]
        assert definitions[name] == (probe.replace(f"{name}_probe", name), enabled), _migration_to_write()
        assert enabled == "O"  # fires (not disabled, not replica-only)


def test_the_check_and_the_trigger_match_on_the_columns_both_tables_keep_unique():
    for name in tombstones.MATCHED_ON:
        assert Job._meta.get_field(name).unique and JobTombstone._meta.get_field(name).unique
        assert f"t.{name} = NEW.{name}" in tombstones.function_sql()
        assert f"t.{name} = j.{name}" in tombstones.LIVE_WITH_TOMBSTONE_SQL


# -- every path that inserts a job is refused -------------------------------------------------------


def _enqueue_job(job_id: str):
    return services.enqueue_job(job_id=job_id, **JOB)


def _one_statement(job_id: str):
    return services.enqueue_claim_and_begin(job_id=job_id, **JOB, worker="agent")


@pytest.mark.django_db
@pytest.mark.parametrize("path", [_enqueue_job, _one_statement], ids=["enqueue_job", "one_statement"])
def test_an_archived_id_is_refused_with_its_tombstone_and_nothing_is_written(path):
    archived("paid")
    before = _ledger_rows()

    with pytest.raises(services.JobArchived) as refused:
        path("paid")

    assert str(refused.value) == ("job 'paid' succeeded on 2026-12-01 10:00 UTC and its history was archived on "
                                  "2026-12-01 in ledger_ledgerevent_gone.jsonl.gz: a job id is never run again")
    assert refused.value.tombstone.job_id == "paid"
    assert _ledger_rows() == before  # and the test's transaction goes on: the refusal took only its savepoint
    assert path("paid-too") is not None  # another id is welcome


@pytest.mark.django_db
def test_an_archived_key_under_another_id_is_refused_too():
    """The key is the action and the id (action:job_id): "reckon.echo:x" could be another action's
    "echo:x". A tombstone holds both unique; the second job with it would fail the next pass."""
    archived("other", key="reckon.echo:x")
    with pytest.raises(services.JobArchived, match="job 'other' succeeded"):
        _enqueue_job("x")
    assert not Job.objects.filter(job_id="x").exists()


def _raw(sql: str, params=()) -> None:
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql, params)


@pytest.mark.django_db
def test_a_job_written_in_sql_is_refused_by_the_database_with_its_own_sqlstate():
    """Any other writer (a bulk load, psql): the database holds the rule, with a code of its own."""
    archived("paid")
    make_job("alive")
    with pytest.raises(IntegrityError) as refused:
        _raw("INSERT INTO ledger_job (job_id, tenant, action, payload, identity, idempotency_key, status, lease_seq, "
             "check_count, recovery_pending) VALUES ('paid', 'acme', 'reckon.echo', '{}', '{}', 'k', 'pending', 0, 0, "
             "false)")
    assert refused.value.__cause__.sqlstate == tombstones.SQLSTATE == "23R01"
    assert "job paid is archived (tombstone of job paid, succeeded" in str(refused.value)
    with pytest.raises(IntegrityError, match="job paid is archived"):
        _raw("UPDATE ledger_job SET job_id = 'paid' WHERE job_id = 'alive'")
    _raw("UPDATE ledger_job SET status = status WHERE job_id = 'alive'")  # other columns: no look-up
    # A job id taken by a live job is still the unique index's (23505), never an archive.
    with pytest.raises(IntegrityError) as taken:
        _raw("INSERT INTO ledger_job (job_id, tenant, action, payload, identity, idempotency_key, status, lease_seq, "
             "check_count, recovery_pending) VALUES ('alive', 'acme', 'reckon.echo', '{}', '{}', 'k2', 'pending', 0, "
             "0, false)")
    assert taken.value.__cause__.sqlstate == "23505"


@pytest.mark.django_db
def test_enqueue_job_reads_no_tombstone_itself():
    """The rule is the database's: enqueue_job no longer spends a query of its own per enqueue on it."""
    with CaptureQueriesContext(connection) as queries:
        _enqueue_job("fresh")
    assert not [q["sql"] for q in queries.captured_queries if tombstones.TOMBSTONES in q["sql"]]


# -- the race: a retention pass commits while the insert waits for it ------------------------------


def _gone_in_an_open_transaction(job: Job) -> psycopg.Connection:
    """What a retention pass does to a job that leaves, without its table locks: the tombstone
    written and the row deleted, not committed (the connection's transaction stays open)."""
    passing = psycopg.connect(database_url_of_tests())
    (checkpoint,) = passing.execute(
        "INSERT INTO ledger_historycheckpoint (partition, range_start, range_end, events, jobs, first_hash, "
        "last_hash, carried, archive_file, archive_sha256, archived_at) VALUES ('ledger_ledgerevent_race', now(), "
        "now(), 0, 1, '', '', '{}', '/archive/ledger_ledgerevent_race.jsonl.gz', '', now()) RETURNING id").fetchone()
    passing.execute("INSERT INTO ledger_jobtombstone (job_id, idempotency_key, tenant, action, status, created_at, "
                    "finished_at, checkpoint_id) VALUES (%s, %s, %s, %s, 'succeeded', now(), now(), %s)",
                    [job.job_id, job.idempotency_key, job.tenant, job.action, checkpoint])
    passing.execute("DELETE FROM ledger_jobsearchtext WHERE job_id = %s", [job.pk])
    passing.execute("DELETE FROM ledger_job WHERE id = %s", [job.pk])
    return passing


def _in_a_thread(work) -> tuple[threading.Thread, dict]:
    outcome: dict = {}

    def run():
        try:
            outcome["returned"] = work()
        except Exception as exc:  # the test asserts on it
            outcome["raised"] = exc
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def _waiting_on(kind: str) -> bool:
    with psycopg.connect(database_url_of_tests(), autocommit=True) as watcher:
        return bool(watcher.execute("SELECT count(*) FROM pg_locks WHERE NOT granted AND locktype = %s",
                                    [kind]).fetchone()[0])


@pytest.mark.parametrize("path", [_enqueue_job, _one_statement], ids=["enqueue_job", "one_statement"])
def test_an_insert_that_waited_on_the_unique_index_for_the_pass_sees_its_tombstone(transactional_db, path):
    """The pass deleted the row and wrote the tombstone; the insert of the same id waits on the
    unique index until the pass commits, then goes in: the trigger runs after it, on a snapshot
    of its own, and refuses it."""
    job = Job.objects.create(job_id="racing", idempotency_key="reckon.echo:racing", **JOB)
    passing = _gone_in_an_open_transaction(job)
    thread, outcome = _in_a_thread(lambda: path("racing"))
    wait_for(lambda: _waiting_on("transactionid"), timeout=30, message="the insert to wait for the pass")
    passing.commit()
    passing.close()
    thread.join(timeout=60)

    assert isinstance(outcome.get("raised"), services.JobArchived), outcome
    assert not Job.objects.filter(job_id="racing").exists()


def test_a_before_insert_check_would_have_let_it_in(transactional_db):
    """Why the trigger runs AFTER the insert: the same race with the check BEFORE it (a copy of the
    function, as a BEFORE trigger, the AFTER one disabled) lets the archived id in."""
    before = tombstones.function_sql().replace(f"FUNCTION {tombstones.FUNCTION}()", "FUNCTION probe_before()")
    with connection.cursor() as cursor:
        cursor.execute(before.replace("RETURN NULL;", "RETURN NEW;"))
        cursor.execute(f"ALTER TABLE ledger_job DISABLE TRIGGER {tombstones.FUNCTION}_insert")
        cursor.execute("CREATE TRIGGER probe_before BEFORE INSERT ON ledger_job FOR EACH ROW "
                       "EXECUTE FUNCTION probe_before()")
    try:
        job = Job.objects.create(job_id="racing", idempotency_key="reckon.echo:racing", **JOB)
        passing = _gone_in_an_open_transaction(job)
        thread, outcome = _in_a_thread(lambda: _enqueue_job("racing"))
        wait_for(lambda: _waiting_on("transactionid"), timeout=30, message="the insert to wait for the pass")
        passing.commit()
        passing.close()
        thread.join(timeout=60)
        assert "raised" not in outcome and outcome["returned"].created_now  # the archived id ran again
        assert Job.objects.filter(job_id="racing").exists() and JobTombstone.objects.filter(job_id="racing").exists()
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TRIGGER IF EXISTS probe_before ON ledger_job")
            cursor.execute("DROP FUNCTION IF EXISTS probe_before()")
            cursor.execute(f"ALTER TABLE ledger_job ENABLE TRIGGER {tombstones.FUNCTION}_insert")


@pytest.fixture
def standard_partitions_afterwards(transactional_db):
    yield
    restore_standard_partitions()


@pytest.mark.parametrize("path", [_enqueue_job, _one_statement], ids=["enqueue_job", "one_statement"])
def test_an_enqueue_that_found_the_job_while_a_real_pass_held_it_is_refused_as_archived(
        standard_partitions_afterwards, tmp_path, path):
    """The real pass (`archive_history`, stopped where its archive file is written and it holds its
    jobs' rows): the insert finds the id taken, the comparison waits for the row, and the pass then
    removes it. The gateway's order: the one statement (which leaves a taken id alone), then enqueue_job."""
    fresh_layout()
    finish("held")
    cut_here()
    stopped = tmp_path / "faults" / "ledger_ledgerevent_t0.archive_written"
    retention = ManagedProcess(
        [sys.executable, str(ROOT / "manage.py"), "archive_history"], log_name="archive_history",
        env={"DATABASE_URL": database_url_of_tests(), "RECKON_HISTORY_ARCHIVE_DIR": str(tmp_path / "archive"),
             "RECKON_HISTORY_RETENTION_DAYS": "0.0000001", "RECKON_FAULT_POINT": "archive_written",
             "RECKON_FAULT_DIR": str(tmp_path / "faults"), "RECKON_FAULT_JOBS": "ledger_ledgerevent_t0"}).start()
    try:
        wait_for(stopped.exists, timeout=60, message="the pass to write its archive file")
        thread, outcome = _in_a_thread(lambda: path("held") or _enqueue_job("held"))
        wait_for(lambda: _waiting_on("transactionid"), timeout=30, message="the comparison to wait for the row")
        os.kill(int(stopped.read_text()), signal.SIGCONT)
        assert retention.process.wait(timeout=120) == 0, retention.output()
        thread.join(timeout=60)
    finally:
        retention.stop()

    assert isinstance(outcome.get("raised"), services.JobArchived), outcome
    assert "job 'held' succeeded on" in str(outcome["raised"])
    assert not Job.objects.filter(job_id="held").exists() and JobTombstone.objects.filter(job_id="held").exists()
