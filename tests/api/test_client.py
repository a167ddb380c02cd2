"""The reckon_client package against a real gunicorn: effect() as a context manager, renewals in
the background during a long step, one keep-alive connection, and waits the server cannot hold."""

from __future__ import annotations

import time

import pytest
from reckon_client import Client, ReckonError

from ledger.models import Job, LedgerEvent
from tests.api.conftest import issue
from tests.conftest import event_kinds, latest_attempt, make_job
from tests.processes import WebServer, database_url_of_tests, wait_for
from tests.reconciliation.helpers import assert_ledger_clean

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def client(api_server) -> Client:
    return Client(api_server.url, issue(["acme"], ["ext.alpha", "ext.slow"], name="client"))


def test_effect_enqueues_claims_begins_and_records_success(client):
    with client.effect("ext.alpha", "fx-1", {"to": "ann"}, tenant="acme", worker="fx") as lease:
        assert lease.begun and lease.payload == {"to": "ann"} and lease.idempotency_key == "ext.alpha:fx-1"
        lease.result_ref = "msg-1"
    attempt = latest_attempt("fx-1")
    assert (attempt.execution_state, attempt.side_effect_state, attempt.result_ref) == ("succeeded", "confirmed", "msg-1")
    assert event_kinds("fx-1") == ["enqueued", "claimed", "side_effect_started", "succeeded"]

    # The same effect again: the job is done, the claim is refused and the block never runs.
    ran = False
    with pytest.raises(ReckonError) as refused:
        with client.effect("ext.alpha", "fx-1", {"to": "ann"}, tenant="acme", worker="fx"):
            ran = True
    assert not ran and (refused.value.code, refused.value.reason) == ("claim_refused", "duplicate_delivery")
    assert_ledger_clean()


def test_an_exception_inside_effect_records_unknown(client):
    with pytest.raises(TimeoutError):
        with client.effect("ext.alpha", "fx-2", {"to": "bob"}, tenant="acme", worker="fx"):
            raise TimeoutError("the provider did not answer")
    attempt = latest_attempt("fx-2")
    assert (attempt.execution_state, attempt.side_effect_state) == ("unknown", "ambiguous")
    assert "TimeoutError: the provider did not answer" in attempt.error
    assert Job.objects.get(job_id="fx-2").status == "needs_reconciliation"
    assert_ledger_clean()


def test_an_exception_before_begin_is_a_retryable_failure(client):
    with pytest.raises(ValueError):
        with client.effect("ext.alpha", "fx-3", {}, tenant="acme", worker="fx", identity={"account": "a"}) as lease:
            assert not lease.begun  # bound to an identity: the block verifies it, then begins
            raise ValueError("the browser profile would not open")
    assert [a.execution_state for a in Job.objects.get(job_id="fx-3").attempts.order_by("number")] == [
        "failed", "not_started"]
    assert Job.objects.get(job_id="fx-3").status == "pending"  # attempt 2 is queued, same key
    assert_ledger_clean()


def test_a_long_step_keeps_its_lease_through_renewals(client):
    """ext.slow's lease lasts 1 s; the step takes several: renewals in the background keep it."""
    started = time.monotonic()
    with client.effect("ext.slow", "fx-slow", {}, tenant="acme", worker="slow") as lease:
        wait_for(lambda: lease.renewals >= 6, timeout=20, message="six renewals")  # the long step
        assert not lease.lost
        lease.result_ref = "done"
    assert time.monotonic() - started > 1.5 * lease.ttl_seconds  # without renewals it would have run out
    assert latest_attempt("fx-slow").execution_state == "succeeded"
    kinds = event_kinds("fx-slow")
    assert kinds.count("lease_renewed") >= 6 and kinds[-1] == "succeeded"
    assert not LedgerEvent.objects.filter(kind__in=["late_write_rejected", "lease_expired_reclaimed"]).exists()
    assert_ledger_clean()


def test_calls_from_one_thread_share_one_keep_alive_connection(client):
    ends = set()
    for n in range(5):
        client.enqueue(f"ka-{n}", tenant="acme", action="ext.alpha", payload={"n": n})
        ends.add(client._transport._local.connection.sock.getsockname())
    assert len(ends) == 1


def test_next_lease_asks_again_when_the_server_cannot_hold_the_wait(external_actions, django_db_setup):
    """A single-threaded server answers at once with Retry-After: the client keeps asking."""
    env = {"DATABASE_URL": database_url_of_tests(), "RECKON_ACTIONS_FILE": str(external_actions),
           "RECKON_CLAIM_POLL_S": "1"}
    with WebServer(env=env, threads=1, log_name="sync-gunicorn") as server:  # gunicorn's sync worker
        client = Client(server.url, issue(["acme"], ["ext.alpha"], name="sync"))
        started = time.monotonic()
        assert client.next_lease("w", wait_seconds=2.5) is None
        assert 2.5 <= time.monotonic() - started < 6
        make_job("sync-1", action="ext.alpha", tenant="acme")
        assert client.next_lease("w", wait_seconds=5).job_id == "sync-1"


def test_enqueue_with_an_idempotency_key_answers_the_same_job_and_refuses_other_work(client):
    first = client.enqueue("keyed-1", tenant="acme", action="ext.alpha", payload={"n": 1}, idempotency_key="k-1")
    again = client.enqueue("keyed-1", tenant="acme", action="ext.alpha", payload={"n": 1}, idempotency_key="k-1")

    with pytest.raises(ReckonError) as refused:
        client.enqueue("keyed-2", tenant="acme", action="ext.alpha", payload={"n": 1}, idempotency_key="k-1")

    assert first["job_id"] == again["job_id"] == "keyed-1"
    assert (refused.value.status, refused.value.code) == (422, "idempotency_key_reused")
    assert list(Job.objects.values_list("job_id", flat=True)) == ["keyed-1"]
