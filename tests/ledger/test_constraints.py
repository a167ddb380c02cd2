"""The database itself refuses what the rules forbid, even from raw SQL."""

import pytest
from django.db import DatabaseError, IntegrityError, connection, transaction

from ledger import services
from ledger.models import LedgerEvent
from tests.conftest import make_job

pytestmark = pytest.mark.django_db


def _sql(statement: str, params=()):
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(statement, params)


@pytest.fixture
def attempt_id():
    job = make_job("j")
    return job.attempts.get().pk


@pytest.mark.parametrize("assignment, constraint", [
    ("execution_state = 'succeeded', side_effect_state = 'submitted'", "attempt_succeeded_consistent"),
    ("execution_state = 'unknown', side_effect_state = 'not_attempted'", "attempt_unknown_consistent"),
    ("execution_state = 'failed', side_effect_state = 'confirmed'", "attempt_failed_consistent"),
    ("execution_state = 'blocked', side_effect_state = 'submitted'", "attempt_blocked_consistent"),
    ("side_effect_state = 'submitted'", "attempt_not_started_consistent"),
    ("delivery_state = 'leased'", "attempt_not_started_consistent"),
    ("execution_state = 'running', delivery_state = 'queued'", "attempt_running_consistent"),
    ("execution_state = 'running', delivery_state = 'leased'", "attempt_running_has_lease"),
    ("execution_state = 'exploded'", "attempt_execution_valid"),
    ("delivery_state = 'lost'", "attempt_delivery_valid"),
    # 'maybe' breaks the vocabulary and the not_started rule; PostgreSQL names whichever it checks first
    ("side_effect_state = 'maybe'", "attempt_side_effect_valid|attempt_not_started_consistent"),
])
def test_raw_sql_breaking_a_consistency_rule_is_refused(attempt_id, assignment, constraint):
    with pytest.raises(IntegrityError, match=constraint):
        _sql(f"UPDATE ledger_attempt SET {assignment} WHERE id = %s", [attempt_id])


def test_a_job_status_outside_the_vocabulary_is_refused():
    make_job("j")
    with pytest.raises(IntegrityError, match="job_status_valid"):
        _sql("UPDATE ledger_job SET status = 'done'")


def test_a_second_live_attempt_is_refused_by_the_partial_unique_index():
    job = make_job("j")
    with pytest.raises(IntegrityError, match="attempt_one_live_per_job"):
        _sql("INSERT INTO ledger_attempt (job_id, number, delivery_state, execution_state, side_effect_state,"
             " lease_owner, result_ref, error, version) VALUES (%s, 2, 'queued', 'not_started', 'not_attempted',"
             " '', '', '', 1)", [job.pk])


def test_a_closed_attempt_does_not_count_as_live():
    make_job("j")
    lease = services.claim_job(job_id="j", worker="w")
    services.begin_side_effect(lease=lease)
    services.record_failure(lease=lease, error="refused", retryable=True)
    assert list(make_job("j").attempts.values_list("execution_state", flat=True).order_by("number")) == [
        "failed", "not_started"]


@pytest.mark.parametrize("statement", [
    "UPDATE ledger_ledgerevent SET note = 'rewritten'",
    "DELETE FROM ledger_ledgerevent",
])
def test_history_cannot_be_rewritten_even_with_raw_sql(statement):
    make_job("j")
    with pytest.raises(DatabaseError, match="Cannot update or delete"):
        _sql(statement)
    assert LedgerEvent.objects.get().note == ""


def test_history_cannot_be_rewritten_through_the_orm():
    make_job("j")
    event = LedgerEvent.objects.get()
    event.note = "rewritten"
    with pytest.raises(DatabaseError), transaction.atomic():
        event.save()
    with pytest.raises(DatabaseError), transaction.atomic():
        LedgerEvent.objects.all().delete()
    assert LedgerEvent.objects.count() == 1


def test_an_event_of_a_kind_outside_the_vocabulary_is_refused():
    job = make_job("j")
    with pytest.raises(IntegrityError, match="event_kind_valid"):
        _sql("INSERT INTO ledger_ledgerevent (job_id, actor_type, actor, kind, \"before\", \"after\", note, evidence) "
             "VALUES (%s, 'system', 'x', 'made_up', '{}', '{}', '', '{}')", [job.pk])
