"""reckon_enqueue (ledger/stepsql.py) and the enqueue_claim_begin statement (ledger/fastpath.py): a new job that its
caller runs at once (the MCP gateway) is enqueued, claimed and begun in one round trip, writing
exactly what enqueue_job (dispatch=False) and claim_and_begin write, and refusing what they refuse
(an archived key: issue 40)."""

from __future__ import annotations

import re

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from ledger import fastpath, services
from ledger.models import JobTombstone
from ledger.states import ActorType, Execution, JobStatus, SideEffect
from tests.conftest import latest_attempt, make_job
from tests.ledger.test_fast_path import Run, _differences, _ledger_rows, _watched, _written
from tests.ledger.test_history_retention import cut_here, fresh_layout, retention_pass

pytestmark = pytest.mark.django_db

JOB = {"job_id": "j", "tenant": "acme", "action": "reckon.echo", "payload": {"n": 1, "to": "a@example.com"}}


def _three_steps(run: Run):
    run(services.enqueue_job, **JOB, actor="agent", actor_type=ActorType.WORKER, dispatch=False)
    return run(services.claim_and_begin, job_id="j", worker="agent")


def _one_statement(run: Run):
    return run(services.enqueue_claim_and_begin, **JOB, worker="agent")


def test_enqueue_claim_and_begin_in_one_statement_writes_what_the_three_steps_write(monkeypatch):
    written, calls = {}, {}
    for name, steps in (("three steps", _three_steps), ("one statement", _one_statement)):
        seen = calls[name] = []
        with monkeypatch.context() as patched, transaction.atomic():
            patched.setattr(fastpath, "run_step", _watched(seen))
            run = Run()
            lease = steps(run)
            run(services.record_success, lease=lease, result_ref="r")
            written[name] = _written()
            transaction.set_rollback(True)
    assert _differences(written["one statement"], written["three steps"]) == []
    assert calls == {"three steps": ["claim_begin", "succeed"], "one statement": ["enqueue_claim_begin", "succeed"]}
    assert [e["kind"] for e in written["one statement"]["events"]] == [
        "enqueued", "claimed", "side_effect_started", "succeeded"]


@pytest.mark.django_db(transaction=True)
def test_it_is_one_round_trip_and_the_side_effect_is_begun():
    """As the gateway calls it, outside a transaction: the statement is its own."""
    with CaptureQueriesContext(connection) as queries:
        lease = services.enqueue_claim_and_begin(**JOB, worker="agent")
    assert len(queries.captured_queries) == 1
    assert (lease.attempt_number, lease.owner, lease.token, lease.job.idempotency_key) == (
        1, "agent", 1, "reckon.echo:j")
    attempt = latest_attempt("j")
    assert (attempt.job.status, attempt.execution_state, attempt.side_effect_state) == (
        JobStatus.RUNNING, Execution.RUNNING, SideEffect.SUBMITTED)


def test_in_a_callers_transaction_the_statement_goes_in_a_savepoint_that_a_refusal_rolls_back():
    with CaptureQueriesContext(connection) as queries:
        services.enqueue_claim_and_begin(**JOB, worker="agent")
    assert [q["sql"].split()[0] for q in queries.captured_queries] == ["SAVEPOINT", "SELECT", "RELEASE"]


def _archived(settings, tmp_path) -> None:
    """JOB ran, succeeded and its history was archived: only its tombstone is left."""
    settings.RECKON_HISTORY_ARCHIVE_DIR = str(tmp_path)
    settings.RECKON_HISTORY_RETENTION_DAYS = 1.0
    settings.RECKON_HISTORY_RETENTION_BY_TENANT = {}
    fresh_layout()
    lease = _one_statement(Run())
    services.record_success(lease=lease, result_ref="r")
    assert retention_pass(cut_here()).archived and JobTombstone.objects.filter(job_id="j").exists()


def test_an_archived_key_is_refused_alike_by_both_and_neither_writes_anything(settings, tmp_path):
    _archived(settings, tmp_path)
    before = _ledger_rows()
    refusals = {}
    for name, steps in (("three steps", _three_steps), ("one statement", _one_statement)):
        with pytest.raises(services.JobArchived) as refused:
            steps(Run())
        refusals[name] = str(refused.value)
        assert _ledger_rows() == before, name
    assert refusals["one statement"] == refusals["three steps"]
    assert re.fullmatch(r"job 'j' succeeded on .* UTC and its history was archived on .* in "
                        r"ledger_ledgerevent_t0\.jsonl\.gz: a job id is never run again", refusals["three steps"])


def test_a_job_id_taken_with_other_work_is_left_alone_by_one_and_refused_by_the_other():
    make_job("j", payload={"other": True})
    before = _ledger_rows()
    assert _one_statement(Run()) is None
    with pytest.raises(services.JobConflict, match="already exists with a different payload"):
        _three_steps(Run())
    assert _ledger_rows() == before


def test_a_job_id_already_taken_is_left_alone_and_says_so_with_none():
    make_job("j", payload={"other": True})
    before = _ledger_rows()
    assert services.enqueue_claim_and_begin(**JOB, worker="agent") is None
    assert _ledger_rows() == before  # enqueue_job (the caller's general path) then compares and refuses


def test_bad_input_is_refused_before_anything_is_written():
    before = _ledger_rows()
    with pytest.raises(services.InvalidJob):
        services.enqueue_claim_and_begin(**{**JOB, "tenant": " "}, worker="agent")
    with pytest.raises(services.InvalidJob):
        services.enqueue_claim_and_begin(**JOB, worker="agent", sent_to="a\x01b")
    assert _ledger_rows() == before


def test_the_statement_is_planned_cheap_enough_never_to_be_jit_compiled():
    """A set-returning function is estimated at 1,000 rows: three of them nested once cost enough
    that PostgreSQL JIT-compiled the statement, 2.5 s a call. LIMIT 1 on the enqueue says one row."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('jit_above_cost')::float8")
        jit_above_cost = cursor.fetchone()[0]
        cursor.execute("EXPLAIN (FORMAT JSON) " + fastpath.STATEMENTS["enqueue_claim_begin"], {
            "job": "j", "tenant": "acme", "action": "reckon.echo", "payload": "{}", "identity": "{}", "policy": None,
            "key": "k", "actor": "a", "actor_type": "worker", "worker": "a", "ttls": "{}", "sent_to": ""})
        plan = cursor.fetchone()[0]
    plan = plan[0] if isinstance(plan, list) else __import__("json").loads(plan)[0]
    assert plan["Plan"]["Total Cost"] < jit_above_cost
