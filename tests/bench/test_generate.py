"""The generator writes the hash chain itself, in Python: it must be the chain the trigger computes."""

import json
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from django.db import connection

from bench import generate as gen
from ledger.invariants import find_violations
from ledger.models import Attempt, Job, LedgerEvent
from ledger.partitions import ensure as ensure_partitions
from tests.ledger.test_tombstones import archived

# Values whose jsonb text PostgreSQL reorders, re-spaces or escapes.
AWKWARD_JSON = [
    {},
    [],
    {"b": 1, "a": 2, "job": "x", "attempt": 1, "side_effect": "ambiguous", "aa": None, "": True},
    {"nested": {"zz": [1, "two", {"y": False, "x": None}], "a": {}}, "list": [[], {}]},
    {"quote\"d": "back\\slash", "ctl": "tab\tnew\nline\rcr\x01\x1f\x7f", "slash": "a/b"},
    {"unicode": "héllo ✓ 日本", "é": 1, "e": 2, "ee": 3},  # keys sort by byte length, then bytes
    {"big": 12345678901234567890, "neg": -7, "zero": 0},
    "just a string",
    42,
    None,
]


def _jsonb_text_in_postgres(value) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT %s::jsonb::text", [json.dumps(value)])
        return cursor.fetchone()[0]


@pytest.mark.django_db
@pytest.mark.parametrize("value", AWKWARD_JSON, ids=range(len(AWKWARD_JSON)))
def test_jsonb_text_is_postgresqls_own_rendering(value):
    assert gen.jsonb_text(value) == _jsonb_text_in_postgres(value)


def test_jsonb_text_refuses_floats():
    with pytest.raises(TypeError):
        gen.jsonb_text({"x": 1.5})


@pytest.mark.django_db
@pytest.mark.parametrize("at", [datetime(2026, 11, 29, 10, 11, 12, 345678, tzinfo=UTC),
                                datetime(2026, 11, 29, 10, 11, 12, tzinfo=UTC),
                                datetime(2026, 11, 29, 10, 11, 12, 7, tzinfo=UTC),
                                datetime(1969, 12, 31, 23, 59, 58, 500000, tzinfo=UTC)])
def test_epoch_text_is_postgresqls_own_rendering(at):
    with connection.cursor() as cursor:
        cursor.execute("SELECT extract(epoch from %s::timestamptz)::text", [at])
        assert gen.epoch_text(at) == cursor.fetchone()[0]


@pytest.mark.django_db
def test_the_python_chain_equals_the_one_the_trigger_computes():
    job = Job.objects.create(job_id="chain-1", tenant="acme", action="mail.send", payload={"n": 1},
                             idempotency_key="mail.send:chain-1")
    attempt = Attempt.objects.create(job=job, number=1)
    times = [datetime(2026, 11, 29, 10, 0, 0, 123456, tzinfo=UTC), datetime(2026, 11, 29, 10, 0, 1, tzinfo=UTC),
             datetime(1969, 12, 31, 23, 59, 59, 1, tzinfo=UTC)]
    for moment in times:  # the event table holds a time only where a partition covers it
        ensure_partitions(moment, moment + timedelta(seconds=2))
    for n, value in enumerate(AWKWARD_JSON[:7]):
        LedgerEvent.objects.create(job=job, attempt=attempt if n % 2 else None, at=times[n % len(times)],
                                   actor_type="system", actor=f"tester-{n} ✓", kind="lease_renewed", before=value,
                                   after=AWKWARD_JSON[n + 1], note=f"note {n}\twith\ttabs 'and' \"quotes\"",
                                   evidence={"n": n, "why": "because"})
    previous = ""
    events = list(LedgerEvent.objects.filter(job=job).order_by("id"))
    assert len(events) == 7
    for event in events:
        assert event.hash, "the trigger did not run"
        expected = gen.chain_hash(previous, job.pk, event.attempt_id, event.at, event.actor_type, event.actor,
                                  event.kind, gen.jsonb_text(event.before), gen.jsonb_text(event.after), event.note,
                                  gen.jsonb_text(event.evidence))
        assert (event.prev_hash, event.hash) == (previous, expected)
        previous = event.hash


def _violations() -> list:
    return [(f.check, f.examples) for f in find_violations() if f.count]


def _indexes() -> set[tuple]:
    """Name, table, uniqueness, columns and whether partial (a recreated predicate deparses a little differently)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexrelid::regclass::text, indrelid::regclass::text, indisunique, indkey::text, "
                       "indpred IS NOT NULL, indisvalid FROM pg_index WHERE indrelid = ANY "
                       "(ARRAY['ledger_job', 'ledger_attempt', 'ledger_ledgerevent']::regclass[])")
        return set(cursor.fetchall())


def _triggers() -> set[tuple[str, str]]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT tgname, tgenabled FROM pg_trigger WHERE tgrelid = 'ledger_ledgerevent'::regclass")
        return set(cursor.fetchall())


@pytest.mark.django_db
def test_a_generated_history_passes_ledger_check():
    made = gen.generate(attempts=400, queued=40, prefix="t")
    assert made.attempts >= 400 and made.queued == 40
    assert LedgerEvent.objects.count() == made.events
    assert not _violations()
    # A second load appends new jobs to the first, with their own chains.
    gen.pending_jobs(count=25, prefix="p")
    assert not _violations()


@pytest.mark.django_db
def test_a_large_load_rebuilds_the_indexes_it_dropped(monkeypatch):
    indexes, triggers = _indexes(), _triggers()
    monkeypatch.setattr(gen, "REBUILD_FROM", 1)
    made = gen.generate(attempts=300, queued=10, prefix="big")
    assert "indexes" in made.phases
    assert _indexes() == indexes and _triggers() == triggers
    assert not _violations()


@pytest.mark.django_db
def test_without_superuser_the_triggers_are_disabled_and_restored(monkeypatch):
    triggers = _triggers()
    monkeypatch.setattr(gen, "_is_superuser", lambda cursor: False)
    made = gen.generate(attempts=200, queued=10, prefix="plain")
    assert "indexes" not in made.phases
    assert _triggers() == triggers
    assert not _violations()


@pytest.mark.django_db
def test_the_chain_is_verified_by_ledger_check_so_a_wrong_hash_is_caught(monkeypatch):
    monkeypatch.setattr(gen, "_epoch_text", lambda micros: str(micros))  # not PostgreSQL's rendering
    gen.generate(attempts=20, queued=0, prefix="bad")
    assert [check for check, _ in _violations()] == ["history_chain_broken"]


@pytest.mark.django_db
@pytest.mark.parametrize("superuser", [True, False], ids=["triggers skipped, checked after", "the trigger"])
def test_a_load_never_brings_an_archived_id_back(monkeypatch, superuser):
    """The job table's tombstone rule holds for the loader too: as a superuser its triggers are
    skipped and the rule is checked set-wise after the load, as the foreign keys are."""
    archived("p-0000001")
    monkeypatch.setattr(gen, "_is_superuser", lambda cursor: superuser)
    # (COPY is the driver's own: its error is psycopg's, with the trigger's SQLSTATE)
    refused = (RuntimeError, "wrote 1 jobs whose id or key was archived") if superuser else (
        psycopg.errors.IntegrityError, "job p-0000001 is archived")
    with pytest.raises(refused[0], match=refused[1]):
        gen.pending_jobs(count=3, prefix="p")
    assert not Job.objects.filter(job_id__startswith="p-").exists()
    gen.pending_jobs(count=3, prefix="q")  # other ids load as before
    assert Job.objects.filter(job_id__startswith="q-").count() == 3
