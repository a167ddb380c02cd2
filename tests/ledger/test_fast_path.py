"""The worker's ordinary steps run as one database round trip each (migration 0005).

The database functions must write exactly what the general Python path writes, and must decline
(change nothing) in every case the general path refuses or treats specially.
"""

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from ledger import services
from ledger.invariants import find_violations
from ledger.models import Attempt, Job, LedgerEvent
from ledger.services import worker
from tests.conftest import expire_lease, latest_attempt, make_job

pytestmark = pytest.mark.django_db

ATTEMPT_FIELDS = ("number", "delivery_state", "execution_state", "side_effect_state", "lease_owner", "lease_token",
                  "result_ref", "error", "version", "observed_identity")


def _cycle(job_id: str) -> tuple:
    lease = services.claim_job(job_id=job_id, worker="w1")
    begun = services.begin_side_effect(lease=lease)
    done = services.record_success(lease=lease, result_ref="ref-1", evidence={"provider_id": "p-1"})
    return lease, begun, done


def _written(job_id: str) -> tuple:
    job = Job.objects.get(job_id=job_id)
    attempt = Attempt.objects.values(*ATTEMPT_FIELDS).get(job=job)
    events = list(LedgerEvent.objects.filter(job=job).order_by("id")
                  .values("kind", "actor_type", "actor", "before", "after", "note", "evidence"))
    # the same history, but for the job's own key in it
    return (job.status, job.lease_seq), attempt, json.dumps(events).replace(job.idempotency_key, "KEY")


def test_each_ordinary_step_is_one_round_trip():
    make_job("j")
    with CaptureQueriesContext(connection) as claim:
        lease = services.claim_job(job_id="j", worker="w1")
    with CaptureQueriesContext(connection) as begin:
        services.begin_side_effect(lease=lease)
    with CaptureQueriesContext(connection) as success:
        services.record_success(lease=lease, result_ref="r")
    assert [len(q.captured_queries) for q in (claim, begin, success)] == [1, 1, 1]
    assert latest_attempt("j").execution_state == "succeeded"


def test_the_fast_steps_write_exactly_what_the_general_path_writes(monkeypatch):
    make_job("fast")
    make_job("general")
    fast = _cycle("fast")
    with monkeypatch.context() as patched:
        patched.setattr(worker, "_one_round_trip", lambda *args: None)
        with CaptureQueriesContext(connection) as general_queries:
            general = _cycle("general")
    assert len(general_queries.captured_queries) > 3  # the general path really ran
    assert _written("fast") == _written("general")
    (fast_lease, *fast_attempts), (general_lease, *general_attempts) = fast, general
    assert (fast_lease.attempt_number, fast_lease.owner, fast_lease.token) == (
        general_lease.attempt_number, general_lease.owner, general_lease.token)
    for a, b in zip(fast_attempts, general_attempts, strict=True):  # what the callers get back is the same too
        assert {f: getattr(a, f) for f in ATTEMPT_FIELDS} == {f: getattr(b, f) for f in ATTEMPT_FIELDS}
    assert [finding for finding in find_violations() if finding.count] == []


def _call(function: str, *args):
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT * FROM {function}({', '.join(['%s'] * len(args))})", args)
        return cursor.fetchall()


def _ledger_state():
    return (list(Job.objects.values().order_by("id")), list(Attempt.objects.values().order_by("id")),
            LedgerEvent.objects.count())


def test_the_functions_decline_every_case_the_general_path_must_decide():
    make_job("j")
    actions = worker._ungated_actions()
    unchanged = _ledger_state()
    assert _call("reckon_claim", "nope", "w1", actions, False) == []  # no such job
    assert _call("reckon_claim", "j", "w1", worker.Jsonb({}), False) == []  # an action the gate may hold
    Job.objects.filter(job_id="j").update(recovery_pending=True)
    assert _call("reckon_claim", "j", "w1", actions, False) == []  # under recovery after a restore
    Job.objects.filter(job_id="j").update(recovery_pending=False)
    unchanged = _ledger_state()

    lease = services.claim_job(job_id="j", worker="w1")
    unchanged = _ledger_state()
    assert _call("reckon_claim", "j", "w2", actions, False) == []  # a live lease: a duplicate delivery
    assert _call("reckon_begin", "j", lease.attempt_id, "w2", lease.token, actions) == []  # not the owner
    assert _call("reckon_begin", "j", lease.attempt_id, "w1", lease.token + 1, actions) == []  # not the token
    assert _call("reckon_succeed", "j", lease.attempt_id, "w1", lease.token, "r", worker.Jsonb({})) == []  # not begun
    expire_lease("j")
    unchanged = _ledger_state()
    assert _call("reckon_begin", "j", lease.attempt_id, "w1", lease.token, actions) == []  # lease expired
    assert _call("reckon_claim", "j", "w2", actions, False) == []  # an expired lease is reclaimed by the general path
    assert _ledger_state() == unchanged

    relet = services.claim_job(job_id="j", worker="w2")  # general path: dead-letters attempt 1, leases 2
    assert relet.attempt_number == 2
    unchanged = _ledger_state()
    assert _call("reckon_succeed", "j", lease.attempt_id, "w1", lease.token, "r", worker.Jsonb({})) == []  # stale
    assert _ledger_state() == unchanged
    with pytest.raises(services.StaleLease):
        services.record_success(lease=lease, result_ref="late")
    assert LedgerEvent.objects.filter(job__job_id="j").last().kind == "late_write_rejected"


def test_an_identity_bound_job_cannot_begin_before_its_identity_is_verified():
    make_job("bound", identity={"account": "acme"})
    lease = services.claim_job(job_id="bound", worker="w1")
    unchanged = _ledger_state()
    assert _call("reckon_begin", "bound", lease.attempt_id, "w1", lease.token, worker._ungated_actions()) == []
    assert _ledger_state() == unchanged
    with pytest.raises(services.LedgerError, match="verify it before any side effect"):
        services.begin_side_effect(lease=lease)
    services.verify_identity(lease=lease, observed={"account": "acme"})
    with CaptureQueriesContext(connection) as begin:
        begun = services.begin_side_effect(lease=lease)
    assert len(begin.captured_queries) == 1 and begun.side_effect_state == "submitted"
    assert begun.observed_identity == {"account": "acme"}


def test_irreversible_work_asks_the_gate_on_the_general_path(settings):
    settings.RECKON_GATE_BOUND_S = 60  # no sweeper or reconciler pass recorded: the gate is closed
    make_job("rot", action="vault.rotate_credential", payload={"name": "db"})
    assert "vault.rotate_credential" not in worker._ungated_actions().obj
    with pytest.raises(services.ClaimRefused) as refused:
        services.claim_job(job_id="rot", worker="w1")
    assert refused.value.reason == "dead_man_gate"


def test_a_claim_inside_a_larger_transaction_leaves_that_transaction_durable():
    """Only a claim that is its own transaction commits without waiting for the WAL flush."""
    make_job("j")
    services.claim_job(job_id="j", worker="w1")  # the test runs inside a transaction
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('synchronous_commit')")
        assert cursor.fetchone()[0] == "on"
        cursor.execute("SELECT * FROM reckon_claim('nope', 'w', '{}'::jsonb, true)")  # declines before any change
        cursor.execute("SELECT current_setting('synchronous_commit')")
        assert cursor.fetchone()[0] == "on"


def test_the_step_calls_are_prepared_once_per_connection_and_nothing_else_is():
    for n in range(7):
        make_job(f"p{n}")
        lease = services.claim_job(job_id=f"p{n}", worker="w1")
        services.begin_side_effect(lease=lease)
        services.record_success(lease=lease, result_ref="r")
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        prepared = [row[0] for row in cursor.fetchall()]
    assert sorted(name for name in ("reckon_claim", "reckon_begin", "reckon_succeed")
                  if any(name in statement for statement in prepared)) == [
        "reckon_begin", "reckon_claim", "reckon_succeed"]
    assert all("reckon_" in statement for statement in prepared), prepared  # Django's own queries are not
