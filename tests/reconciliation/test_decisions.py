"""Operators' decisions as services: allowed by state, versioned, noted, recorded."""

import re

import pytest

from approvals.models import ApprovalRequest
from ledger import services
from ledger.models import Job, LedgerEvent
from reconciliation import decisions
from tests.conftest import latest_attempt, make_job
from tests.reconciliation.helpers import MAIL, assert_ledger_clean, unknown_job

pytestmark = pytest.mark.django_db


def _decide(decision, job_id, user, note="checked the provider's dashboard", version=None):
    version = latest_attempt(job_id).version if version is None else version
    return decisions.decide(decision, job_id=job_id, version=version, user=user, note=note)


def _blocked_job(job_id):
    make_job(job_id, identity={"account": "a"})
    lease = services.claim_job(job_id=job_id, worker="w1")
    with pytest.raises(services.IdentityMismatch):
        services.verify_identity(lease=lease, observed={"account": "b"})


def test_confirm_effect_closes_an_unknown_attempt(provider, operator):
    unknown_job("m1", "mail.send", MAIL)
    _decide("confirm_effect", "m1", operator)
    attempt = latest_attempt("m1")
    assert (attempt.execution_state, attempt.side_effect_state) == ("succeeded", "confirmed")
    event = LedgerEvent.objects.filter(job__job_id="m1").last()
    assert (event.kind, event.actor_type, event.actor) == ("operator_confirmed_effect", "operator", "olga")
    assert event.note == "checked the provider's dashboard"
    assert Job.objects.get(job_id="m1").status == "succeeded"
    assert_ledger_clean()


def test_mark_not_found_replays_a_reversible_action(provider, operator):
    unknown_job("m1", "mail.send", MAIL)
    _decide("mark_not_found", "m1", operator)
    first, second = Job.objects.get(job_id="m1").attempts.order_by("number")
    assert (first.execution_state, first.side_effect_state) == ("failed", "not_found")
    assert second.execution_state == "not_started" and Job.objects.get(job_id="m1").status == "pending"
    assert_ledger_clean()


def test_mark_not_found_on_a_blocked_attempt_is_refused_it_sent_nothing(operator):
    """"Not found" would replay straight into the same mismatch: a blocked attempt is re-checked
    and replayed once its binding matches (tests/console/test_triage_blocked.py)."""
    _blocked_job("b1")
    before = LedgerEvent.objects.filter(job__job_id="b1").count()
    with pytest.raises(decisions.DecisionRefused, match="re-check identity"):
        _decide("mark_not_found", "b1", operator, note="profile fixed")
    assert LedgerEvent.objects.filter(job__job_id="b1").count() == before
    assert latest_attempt("b1").execution_state == "blocked"
    assert_ledger_clean()


def test_mark_not_found_on_an_irreversible_action_opens_an_approval_request(provider, operator):
    unknown_job("v1", "vault.rotate_credential", {"name": "db"})
    _decide("mark_not_found", "v1", operator, note="vault audit log shows no rotation")
    job = Job.objects.get(job_id="v1")
    assert job.status == "awaiting_approval" and job.attempts.count() == 1
    request = ApprovalRequest.objects.get(job=job)
    assert request.requested_by == operator and "vault audit log" in request.reason
    assert request.evidence["marked_not_found_by"] == operator.username
    assert request.evidence["operator_note"] == "vault audit log shows no rotation"
    assert request.evidence["attempt_error"] == "connection dropped after sending"
    assert_ledger_clean()


@pytest.mark.parametrize("status_maker", ["unknown", "blocked", "needs_operator"])
def test_escalate_from_the_states_that_need_a_person(provider, operator, status_maker):
    if status_maker == "blocked":
        _blocked_job("j1")
    else:
        unknown_job(
            "j1",
            "mail.send" if status_maker == "unknown" else "vault.rotate_credential",
            MAIL if status_maker == "unknown" else {"name": "db"},
        )
        if status_maker == "needs_operator":
            from reconciliation.passes import reconcile_job

            reconcile_job(job_id="j1")
    _decide("escalate", "j1", operator, note="needs the vendor")
    assert Job.objects.get(job_id="j1").status == "escalated"
    assert_ledger_clean()


def test_retry_reconciliation_puts_the_job_back_in_line_now(provider, operator):
    unknown_job("m1", "mail.send", MAIL)
    _decide("escalate", "m1", operator)
    _decide("retry_reconciliation", "m1", operator, note="vendor says try again")
    job = Job.objects.get(job_id="m1")
    assert job.status == "needs_reconciliation" and job.next_check_at is None and job.check_count == 0
    from reconciliation.passes import reconcile_until_idle

    assert [d.job_id for d in reconcile_until_idle()] == ["m1"]
    assert_ledger_clean()


def test_cancel_closes_a_queued_attempt_and_keeps_an_unknown_one(provider, operator):
    make_job("q1")
    unknown_job("u1", "mail.send", MAIL)
    _decide("cancel_job", "q1", operator, note="customer withdrew")
    _decide("cancel_job", "u1", operator, note="customer withdrew")
    queued, unknown = latest_attempt("q1"), latest_attempt("u1")
    assert (queued.execution_state, queued.side_effect_state) == ("failed", "not_attempted")
    assert unknown.execution_state == "unknown"
    assert set(Job.objects.values_list("status", flat=True)) == {"cancelled"}
    with pytest.raises(services.ClaimRefused):
        services.claim_job(job_id="q1", worker="late")
    assert_ledger_clean()


def test_cancel_withdraws_a_pending_approval(provider, operator):
    unknown_job("v1", "vault.rotate_credential", {"name": "db"})
    _decide("mark_not_found", "v1", operator)
    _decide("cancel_job", "v1", operator, note="not needed any more")
    assert ApprovalRequest.objects.get().status == "withdrawn"
    assert_ledger_clean()


def test_a_stale_version_is_refused_with_who_and_when(provider, operator, approver):
    unknown_job("m1", "mail.send", MAIL)
    seen = latest_attempt("m1").version
    _decide("confirm_effect", "m1", operator, version=seen)
    events_before = LedgerEvent.objects.count()
    with pytest.raises(decisions.StaleDecision) as refused:
        _decide("mark_not_found", "m1", approver, version=seen)
    message = str(refused.value)
    assert re.fullmatch(r"olga confirmed the effect of this job at \d\d:\d\d:\d\d \(just now\) — your decision was not "
                        r"applied\. Their note: .*\. Your note is kept in the job's history as a comment\.", message)
    assert refused.value.event.kind == "operator_confirmed_effect"
    # Nothing changed but the race loser's note, kept as a comment that names the refused decision.
    assert latest_attempt("m1").number == 1 and latest_attempt("m1").execution_state == "succeeded"
    comment = LedgerEvent.objects.order_by("-id").first()
    assert LedgerEvent.objects.count() == events_before + 1
    assert (comment.kind, comment.actor, comment.actor_type, comment.note) == (
        "job_commented", approver.username, "operator", "checked the provider's dashboard")
    assert comment.evidence["refused_decision"] == "mark_not_found" and comment.before == comment.after


def test_a_decision_the_state_does_not_allow_is_refused_and_changes_nothing(provider, operator):
    make_job("q1")
    before = LedgerEvent.objects.count()
    with pytest.raises(decisions.DecisionRefused, match="only an unknown attempt can be confirmed"):
        _decide("confirm_effect", "q1", operator)
    with pytest.raises(decisions.DecisionRefused, match="cannot be escalated"):
        _decide("escalate", "q1", operator)
    lease = services.claim_job(job_id="q1", worker="w1")
    with pytest.raises(decisions.DecisionRefused, match="running job cannot be cancelled"):
        _decide("cancel_job", "q1", operator)
    assert LedgerEvent.objects.count() == before + 1  # only the claim
    assert lease.attempt_number == 1


def test_a_note_is_required(provider, operator):
    unknown_job("m1", "mail.send", MAIL)
    with pytest.raises(decisions.DecisionRefused, match="a note is required"):
        _decide("confirm_effect", "m1", operator, note="   ")
    assert latest_attempt("m1").execution_state == "unknown"


def test_allowed_decisions_follow_the_state(provider, operator):
    make_job("q1")
    unknown_job("m1", "mail.send", MAIL)
    unknown_job("v1", "vault.rotate_credential", {"name": "db"})
    _blocked_job("b1")
    allowed = {j: decisions.allowed_decisions(Job.objects.get(job_id=j)) for j in ("q1", "m1", "v1", "b1")}
    assert allowed["q1"] == ["cancel_job"]
    assert allowed["m1"] == [
        "confirm_effect",
        "mark_not_found",
        "escalate",
        "retry_reconciliation",
        "cancel_job",
    ]
    assert allowed["v1"] == ["confirm_effect", "mark_not_found", "escalate", "cancel_job"]
    # Blocked: nothing to find; reckon.echo has no identity check to run again, so no re-check either.
    assert allowed["b1"] == ["escalate", "cancel_job"]
    _decide("confirm_effect", "m1", operator)
    assert decisions.allowed_decisions(Job.objects.get(job_id="m1")) == []
