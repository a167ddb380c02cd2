"""The worker loop (`ledger.runtime.run_job`) with actions registered by the test."""

import threading
from datetime import timedelta

import pytest
from django.db import connection

from ledger import runtime
from ledger.actions import Action, Failed, Succeeded, Unknown, register
from ledger.invariants import find_violations
from ledger.models import Job, LedgerEvent
from tests.conftest import event_kinds, latest_attempt, make_job
from tests.processes import wait_for

pytestmark = pytest.mark.django_db


def _action(name: str, executor, **options) -> str:
    register(Action(name=name, executor=executor, **options))
    return name


@pytest.mark.parametrize("outcome, status, side_effect", [
    (Succeeded(result_ref="inv_1"), "succeeded", "confirmed"),
    (Failed(error="422 invalid amount"), "failed", "not_found"),
    (Unknown(reason="read timeout"), "needs_reconciliation", "ambiguous"),
])
def test_each_outcome_is_recorded(outcome, status, side_effect):
    make_job("j", action=_action("test.fixed", lambda job: outcome))
    runtime.run_job("j", worker="w")
    assert Job.objects.get(job_id="j").status == status
    assert latest_attempt("j").side_effect_state == side_effect


def test_an_executor_that_raises_is_unknown_never_failed():
    def explode(job):
        raise ConnectionResetError("peer reset after request was sent")

    make_job("j", action=_action("test.explodes", explode))
    assert runtime.run_job("j", worker="w") == "unknown"
    attempt = latest_attempt("j")
    assert (attempt.execution_state, attempt.side_effect_state) == ("unknown", "ambiguous")
    assert "ConnectionResetError" in attempt.error


def test_the_executor_gets_the_idempotency_key_and_runs_after_submission():
    seen = {}

    def record(job):
        seen["key"] = job.idempotency_key
        seen["side_effect"] = latest_attempt(job.job_id).side_effect_state
        return Succeeded()

    make_job("j", action=_action("test.record", record))
    runtime.run_job("j", worker="w")
    assert seen == {"key": "test.record:j", "side_effect": "submitted"}


def test_a_refused_claim_returns_the_reason_and_calls_nothing():
    calls = []
    make_job("j", action=_action("test.calls", lambda job: calls.append(1) or Succeeded()))
    runtime.run_job("j", worker="w")
    assert runtime.run_job("j", worker="w2") == "refused:duplicate_delivery"
    assert calls == [1]


def test_identity_is_observed_and_a_mismatch_blocks_before_the_call():
    calls = []
    name = _action("test.bound", lambda job: calls.append(1) or Succeeded(),
                   observe_identity=lambda job: {"account": "someone-else"})
    make_job("j", action=name, identity={"account": "acme"})
    assert runtime.run_job("j", worker="w") == "blocked"
    assert calls == []
    assert Job.objects.get(job_id="j").status == "blocked"


def test_an_identity_that_cannot_be_read_fails_the_attempt_retryably():
    def unreadable(job):
        raise TimeoutError("profile page did not load")

    make_job("j", action=_action("test.unreadable", lambda job: Succeeded(), observe_identity=unreadable),
             identity={"account": "acme"})
    assert runtime.run_job("j", worker="w") == "failed"
    assert event_kinds("j")[-2:] == ["failed", "attempt_opened"]


@pytest.mark.django_db(transaction=True)
def test_a_slow_call_keeps_its_lease_alive_and_still_records_its_result():
    started, release = threading.Event(), threading.Event()

    def slow(job):
        started.set()
        assert release.wait(10)
        return Succeeded(result_ref="slow-but-fine")

    make_job("slow", action=_action("test.slow", slow, lease_ttl=timedelta(seconds=0.3)))
    done = {}

    def work():
        try:
            done["result"] = runtime.run_job("slow", worker="w")
        finally:
            connection.close()

    worker = threading.Thread(target=work)
    worker.start()
    assert started.wait(10)
    # Let the lease be renewed several times over what would otherwise have expired it.
    wait_for(lambda: LedgerEvent.objects.filter(job__job_id="slow", kind="lease_renewed").count() >= 4,
             timeout=10, message="four renewals")
    release.set()
    worker.join(10)
    assert done["result"] == "succeeded"
    assert latest_attempt("slow").result_ref == "slow-but-fine"
    assert not [f for f in find_violations() if f.count]
