"""Tamper-evident history: each event carries its job's previous hash and its own."""

import hashlib

import pytest
from django.db import connection

from ledger import services
from ledger.invariants import find_violations, first_broken_event
from ledger.models import Job, LedgerEvent
from tests.conftest import make_job

pytestmark = pytest.mark.django_db


def _run(job_id: str) -> Job:
    make_job(job_id)
    lease = services.claim_job(job_id=job_id, worker="w")
    services.begin_side_effect(lease=lease)
    services.record_success(lease=lease, result_ref="r")
    return Job.objects.get(job_id=job_id)


def test_each_event_links_to_the_previous_event_of_its_job():
    job = _run("a")
    _run("b")  # interleaved jobs have chains of their own
    events = list(job.events.order_by("id"))
    assert len(events) == 4
    assert events[0].prev_hash == ""
    for earlier, later in zip(events, events[1:], strict=False):
        assert later.prev_hash == earlier.hash
    assert all(len(e.hash) == 64 for e in events)
    assert len({e.hash for e in LedgerEvent.objects.all()}) == LedgerEvent.objects.count()
    assert first_broken_event(job.pk) is None


def test_the_hash_covers_the_content_as_the_database_renders_it():
    job = _run("a")
    first = job.events.order_by("id").first()
    with connection.cursor() as cursor:
        cursor.execute("SELECT extract(epoch from at)::text, \"after\"::text, \"before\"::text, evidence::text "
                       "FROM ledger_ledgerevent WHERE id = %s", [first.pk])
        epoch, after, before, evidence = cursor.fetchone()
    content = "\x1f".join(["", str(job.pk), str(first.attempt_id), epoch, first.actor_type, first.actor,
                           first.kind, before, after, first.note, evidence])
    assert first.hash == hashlib.sha256(content.encode()).hexdigest()


def _tamper(statement: str, params) -> None:
    """An out-of-band change, made with the append-only trigger disabled in this test's transaction."""
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute("ALTER TABLE ledger_ledgerevent DISABLE TRIGGER USER")
        cursor.execute(statement, params)
        cursor.execute("ALTER TABLE ledger_ledgerevent ENABLE TRIGGER USER")


def test_a_rewritten_note_is_reported_at_that_event():
    job = _run("a")
    _run("b")
    target = job.events.order_by("id")[2]
    _tamper("UPDATE ledger_ledgerevent SET note = 'nothing to see' WHERE id = %s", [target.pk])
    assert first_broken_event(job.pk) == target.pk
    broken = {f.check: f for f in find_violations()}["history_chain_broken"]
    assert broken.count == 1 and broken.examples == [f"a at event {target.pk}"]


def test_a_deleted_event_is_reported_at_the_event_after_it():
    job = _run("a")
    events = list(job.events.order_by("id"))
    _tamper("DELETE FROM ledger_ledgerevent WHERE id = %s", [events[1].pk])
    assert first_broken_event(job.pk) == events[2].pk


def test_a_disabled_chain_trigger_is_reported():
    _run("a")
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute("ALTER TABLE ledger_ledgerevent DISABLE TRIGGER USER")
    broken = {f.check: f for f in find_violations()}["history_not_protected"]
    assert broken.count == 2
