"""begin_side_effect, renew_lease, verify_identity and the three results, with their CAS rules."""

import pytest

from ledger import services
from ledger.models import Attempt, Job, LedgerEvent
from tests.conftest import event_kinds, expire_lease, latest_attempt, make_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def lease():
    make_job("j")
    return services.claim_job(job_id="j", worker="w1")


def test_begin_side_effect_marks_the_attempt_submitted(lease):
    attempt = services.begin_side_effect(lease=lease)
    assert attempt.side_effect_state == "submitted" and attempt.execution_state == "running"
    event = LedgerEvent.objects.filter(kind="side_effect_started").get()
    assert event.evidence == {"idempotency_key": "reckon.echo:j"}
    assert (event.before["side_effect"], event.after["side_effect"]) == ("not_attempted", "submitted")


def test_begin_side_effect_is_refused_once_the_lease_has_expired_by_the_database_clock(lease):
    expire_lease("j")
    with pytest.raises(services.StaleLease, match="its lease expired"):
        services.begin_side_effect(lease=lease)
    assert latest_attempt("j").side_effect_state == "not_attempted"
    assert event_kinds("j")[-1] == "late_write_rejected"


def test_begin_side_effect_twice_is_a_caller_error_and_changes_nothing(lease):
    services.begin_side_effect(lease=lease)
    version = latest_attempt("j").version
    with pytest.raises(services.LedgerError, match="already submitted"):
        services.begin_side_effect(lease=lease)
    assert latest_attempt("j").version == version


def test_record_success_confirms_the_effect_and_finishes_the_job(lease):
    services.begin_side_effect(lease=lease)
    services.record_success(lease=lease, result_ref="inv_123", evidence={"status": 201})
    attempt = latest_attempt("j")
    assert (attempt.delivery_state, attempt.execution_state, attempt.side_effect_state) == (
        "acknowledged", "succeeded", "confirmed")
    assert attempt.result_ref == "inv_123"
    assert Job.objects.get(job_id="j").status == "succeeded"
    assert LedgerEvent.objects.get(kind="succeeded").evidence == {"status": 201}


def test_record_success_without_a_submitted_effect_is_refused(lease):
    with pytest.raises(services.LedgerError, match="before begin_side_effect"):
        services.record_success(lease=lease, result_ref="r")
    assert latest_attempt("j").execution_state == "running"


def test_a_result_is_accepted_after_expiry_while_nobody_took_the_lease_over(lease):
    """The lease token still matches: the worker knows what happened, so the ledger takes it."""
    services.begin_side_effect(lease=lease)
    expire_lease("j")
    services.record_success(lease=lease, result_ref="late-but-ours")
    assert latest_attempt("j").side_effect_state == "confirmed"


def test_record_failure_after_submission_means_not_found_and_fails_the_job(lease):
    services.begin_side_effect(lease=lease)
    services.record_failure(lease=lease, error="422: amount must be positive")
    attempt = latest_attempt("j")
    assert (attempt.execution_state, attempt.side_effect_state, attempt.error) == (
        "failed", "not_found", "422: amount must be positive")
    assert Job.objects.get(job_id="j").status == "failed"


def test_record_failure_before_submission_keeps_not_attempted(lease):
    services.record_failure(lease=lease, error="profile could not be read")
    assert latest_attempt("j").side_effect_state == "not_attempted"


def test_a_retryable_failure_queues_the_next_attempt_with_the_same_key(lease):
    services.begin_side_effect(lease=lease)
    services.record_failure(lease=lease, error="connection refused", retryable=True)
    first, second = Attempt.objects.order_by("number")
    assert (first.execution_state, first.side_effect_state) == ("failed", "not_found")
    assert (second.execution_state, second.delivery_state) == ("not_started", "queued")
    assert Job.objects.get(job_id="j").status == "pending"
    assert event_kinds("j")[-2:] == ["failed", "attempt_opened"]
    assert LedgerEvent.objects.get(kind="attempt_opened").evidence["idempotency_key"] == "reckon.echo:j"


def test_record_unknown_marks_the_effect_ambiguous_and_the_job_for_reconciliation(lease):
    services.begin_side_effect(lease=lease)
    services.record_unknown(lease=lease, reason="timeout after 10 s")
    attempt = latest_attempt("j")
    assert (attempt.delivery_state, attempt.execution_state, attempt.side_effect_state) == (
        "acknowledged", "unknown", "ambiguous")
    assert Job.objects.get(job_id="j").status == "needs_reconciliation"
    assert LedgerEvent.objects.get(kind="observation_lost").note == "timeout after 10 s"


def test_record_unknown_before_any_side_effect_is_refused(lease):
    with pytest.raises(services.LedgerError, match="nothing can have happened"):
        services.record_unknown(lease=lease, reason="?")


def test_a_stale_writer_changes_nothing_and_is_recorded():
    make_job("j")
    old = services.claim_job(job_id="j", worker="slow")
    expire_lease("j")
    new = services.claim_job(job_id="j", worker="fast")
    services.begin_side_effect(lease=new)
    before = Attempt.objects.order_by("number").values()
    before = list(before)
    for write in (lambda: services.begin_side_effect(lease=old),
                  lambda: services.record_success(lease=old, result_ref="dup"),
                  lambda: services.record_failure(lease=old, error="x"),
                  lambda: services.record_unknown(lease=old, reason="x"),
                  lambda: services.renew_lease(lease=old)):
        with pytest.raises(services.StaleLease, match="fencing token 1 rejected"):
            write()
    assert list(Attempt.objects.order_by("number").values()) == before
    rejected = LedgerEvent.objects.filter(kind="late_write_rejected")
    assert rejected.count() == 5
    assert {e.evidence["stale_token"] for e in rejected} == {1}
    assert {e.evidence["current_token"] for e in rejected} == {2}
    assert rejected.get(evidence__operation="record_success").evidence["reported"] == {}


def test_renew_lease_extends_only_a_valid_lease(lease):
    renewed = services.renew_lease(lease=lease)
    assert renewed.expires_at > lease.expires_at and renewed.token == lease.token
    assert latest_attempt("j").lease_expires_at == renewed.expires_at
    expire_lease("j")
    with pytest.raises(services.StaleLease):
        services.renew_lease(lease=renewed)
    assert event_kinds("j")[-2:] == ["lease_renewed", "late_write_rejected"]


def test_identity_matching_the_binding_is_recorded_and_allows_the_side_effect():
    make_job("p", identity={"profile": "p1", "account": "acme-main"})
    lease = services.claim_job(job_id="p", worker="w")
    with pytest.raises(services.LedgerError, match="verify it before any side effect"):
        services.begin_side_effect(lease=lease)
    services.verify_identity(lease=lease, observed={"profile": "p1", "account": "acme-main", "extra": 1})
    services.begin_side_effect(lease=lease)
    attempt = latest_attempt("p")
    assert attempt.observed_identity["account"] == "acme-main"
    assert event_kinds("p")[-2:] == ["identity_verified", "side_effect_started"]


def test_identity_mismatch_blocks_the_attempt_and_the_job_before_any_side_effect():
    make_job("p", identity={"profile": "p1", "account": "acme-main"})
    lease = services.claim_job(job_id="p", worker="w")
    with pytest.raises(services.IdentityMismatch, match="account is 'other', job is bound to 'acme-main'"):
        services.verify_identity(lease=lease, observed={"profile": "p1", "account": "other"})
    attempt = latest_attempt("p")
    assert (attempt.execution_state, attempt.side_effect_state) == ("blocked", "not_attempted")
    assert Job.objects.get(job_id="p").status == "blocked"
    event = LedgerEvent.objects.get(kind="identity_mismatch")
    assert event.evidence["observed"]["account"] == "other"
    with pytest.raises(services.StaleLease):
        services.begin_side_effect(lease=lease)


def test_identity_cannot_be_verified_after_the_side_effect_began(lease):
    services.begin_side_effect(lease=lease)
    version = latest_attempt("j").version
    with pytest.raises(services.LedgerError, match="before the side effect begins"):
        services.verify_identity(lease=lease, observed={"account": "other"})
    attempt = latest_attempt("j")
    assert (attempt.version, attempt.execution_state, attempt.side_effect_state) == (version, "running", "submitted")
