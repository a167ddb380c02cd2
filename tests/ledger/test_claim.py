from dataclasses import replace

import pytest

from ledger import services
from ledger.models import Attempt, Job, LedgerEvent
from tests.conftest import event_kinds, expire_lease, latest_attempt, make_job

pytestmark = pytest.mark.django_db


def test_it_leases_the_queued_attempt_with_the_next_fencing_token():
    make_job("j")
    lease = services.claim_job(job_id="j", worker="w1")
    attempt = latest_attempt("j")
    assert (lease.owner, lease.token, lease.attempt_number) == ("w1", 1, 1)
    assert (attempt.delivery_state, attempt.execution_state, attempt.side_effect_state) == (
        "leased", "running", "not_attempted")
    assert attempt.lease_owner == "w1" and attempt.lease_token == 1
    assert attempt.lease_expires_at == lease.expires_at
    assert Job.objects.get(job_id="j").status == "running"
    assert event_kinds("j") == ["enqueued", "claimed"]


def test_a_duplicate_delivery_during_a_live_lease_is_refused_and_recorded():
    make_job("j")
    services.claim_job(job_id="j", worker="w1")
    before = Attempt.objects.values().get()
    with pytest.raises(services.ClaimRefused, match="is leased until") as refused:
        services.claim_job(job_id="j", worker="w2")
    assert refused.value.reason == "duplicate_delivery"
    assert "w1" not in str(refused.value)  # the refused caller may be another token's worker
    assert Attempt.objects.values().get() == before
    assert Job.objects.get(job_id="j").lease_seq == 1
    assert Job.objects.get(job_id="j").duplicate_deliveries == 1
    assert event_kinds("j")[-1] == "duplicate_delivery"
    recorded = LedgerEvent.objects.get(job__job_id="j", kind="duplicate_delivery")
    assert (recorded.evidence["lease_owner"], recorded.evidence["fencing_token"]) == ("w1", 1)


def test_a_refused_claim_asked_again_and_again_is_counted_and_written_once():
    """Issue 24: one naive retry loop wrote 843 refusals into a job's history."""
    make_job("j")
    lease = services.claim_job(job_id="j", worker="w1")
    services.begin_side_effect(lease=lease)
    services.record_unknown(lease=lease, reason="dropped")
    for _ in range(20):
        with pytest.raises(services.ClaimRefused, match="no retry until it is reconciled"):
            services.claim_job(job_id="j", worker="w2")
    for _ in range(5):
        with pytest.raises(services.ClaimRefused):
            services.claim_job(job_id="j", worker="w3")
    job = Job.objects.get(job_id="j")
    # Counted every time; written once per worker (who was refused, and why).
    assert job.claims_refused == 25 and event_kinds("j").count("claim_refused") == 2
    make_job("k")
    services.claim_job(job_id="k", worker="w1")
    for _ in range(10):
        with pytest.raises(services.ClaimRefused, match="duplicate delivery"):
            services.claim_job(job_id="k", worker="w2")
    assert Job.objects.get(job_id="k").duplicate_deliveries == 10
    assert event_kinds("k").count("duplicate_delivery") == 1


def test_a_delivery_of_a_finished_job_is_refused_as_a_duplicate():
    make_job("j")
    lease = services.claim_job(job_id="j", worker="w1")
    services.begin_side_effect(lease=lease)
    services.record_success(lease=lease, result_ref="r")
    with pytest.raises(services.ClaimRefused) as refused:
        services.claim_job(job_id="j", worker="w2")
    assert refused.value.reason == "duplicate_delivery"
    assert "job is succeeded" in str(refused.value)
    assert Attempt.objects.count() == 1


def test_an_expired_lease_before_any_side_effect_is_dead_lettered_and_the_next_attempt_leased():
    make_job("j")
    services.claim_job(job_id="j", worker="w1")
    expire_lease("j")
    lease = services.claim_job(job_id="j", worker="w2")
    first, second = Attempt.objects.order_by("number")
    assert (first.delivery_state, first.execution_state, first.side_effect_state) == (
        "dead_lettered", "failed", "not_attempted")
    assert "expired before any side effect" in first.error
    assert (second.number, second.execution_state, second.lease_owner, second.lease_token) == (
        2, "running", "w2", 2)
    assert lease.token == 2
    assert event_kinds("j") == ["enqueued", "claimed", "lease_expired_reclaimed", "attempt_opened", "claimed"]
    assert Job.objects.get(job_id="j").idempotency_key == "reckon.echo:j"


def test_an_expired_lease_after_the_side_effect_started_becomes_unknown_and_blocks_the_claim():
    make_job("j")
    lease = services.claim_job(job_id="j", worker="w1")
    services.begin_side_effect(lease=lease)
    expire_lease("j")
    with pytest.raises(services.ClaimRefused) as refused:
        services.claim_job(job_id="j", worker="w2")
    assert refused.value.reason == "previous_attempt_unknown"
    attempt = Attempt.objects.get()
    assert (attempt.execution_state, attempt.side_effect_state) == ("unknown", "ambiguous")
    assert Job.objects.get(job_id="j").status == "needs_reconciliation"
    assert event_kinds("j")[-2:] == ["lease_expired_unknown", "claim_refused"]


def test_an_unknown_attempt_blocks_every_retry():
    """The invariant: no new attempt while a previous one is unknown."""
    make_job("j")
    lease = services.claim_job(job_id="j", worker="w1")
    services.begin_side_effect(lease=lease)
    services.record_unknown(lease=lease, reason="connection reset after sending")
    for worker in ("w2", "w3"):
        with pytest.raises(services.ClaimRefused, match="is unknown") as refused:
            services.claim_job(job_id="j", worker=worker)
        assert refused.value.reason == "previous_attempt_unknown"
    assert Attempt.objects.count() == 1
    assert Job.objects.get(job_id="j").lease_seq == 1


def test_a_blocked_attempt_blocks_the_claim():
    make_job("j", identity={"account": "acme-main"})
    lease = services.claim_job(job_id="j", worker="w1")
    with pytest.raises(services.IdentityMismatch):
        services.verify_identity(lease=lease, observed={"account": "someone-else"})
    with pytest.raises(services.ClaimRefused) as refused:
        services.claim_job(job_id="j", worker="w2")
    assert refused.value.reason == "attempt_blocked"


def test_attempts_are_bounded_by_the_actions_max_attempts():
    make_job("j")  # reckon.echo allows 3 attempts
    for worker in ("w1", "w2", "w3"):
        services.claim_job(job_id="j", worker=worker)
        expire_lease("j")
    with pytest.raises(services.ClaimRefused) as refused:
        services.claim_job(job_id="j", worker="w4")
    assert refused.value.reason == "attempts_exhausted"
    assert Attempt.objects.count() == 3
    assert Job.objects.get(job_id="j").status == "failed"
    assert event_kinds("j")[-1] == "attempts_exhausted"


def test_claiming_a_job_that_does_not_exist_is_a_clear_error():
    with pytest.raises(services.LedgerError, match="no job with id 'nope'"):
        services.claim_job(job_id="nope", worker="w1")


def test_a_lease_naming_another_jobs_attempt_is_refused_and_changes_nothing():
    make_job("mine")
    make_job("theirs")
    lease = services.claim_job(job_id="mine", worker="w")
    theirs = services.claim_job(job_id="theirs", worker="w")
    forged = replace(lease, attempt_id=theirs.attempt_id, token=theirs.token)
    with pytest.raises(services.LedgerError, match=f"attempt {theirs.attempt_id} is not an attempt of job mine"):
        services.record_unknown(lease=forged, reason="forged")
    assert latest_attempt("theirs").execution_state == "running"
    assert latest_attempt("mine").execution_state == "running"
