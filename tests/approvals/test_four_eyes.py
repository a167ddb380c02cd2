"""Four eyes on every path: also when the reconciler, not a person, asks for the approval."""

from datetime import timedelta

import pytest

from approvals import services as approvals
from approvals.models import ApprovalRequest
from ledger import services
from ledger.actions import Action, _registry, register
from ledger.models import Job
from reconciliation import decisions
from reconciliation.passes import reconcile_job
from sandbox.demo_actions import send_mail
from tests.conftest import _persona, latest_attempt
from tests.reconciliation.helpers import MAIL, assert_ledger_clean, unknown_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def irreversible_mail(provider):
    """A queryable action whose replay needs a second person's approval."""
    register(Action(name="test.four_eyes_mail", executor=send_mail, reversible=False, queryable=True,
                    reconciler="sandbox.reconcilers.mail", lease_ttl=timedelta(seconds=30)))
    yield "test.four_eyes_mail"
    _registry.pop("test.four_eyes_mail")


def test_the_operator_whose_retry_led_to_the_request_cannot_approve_it(irreversible_mail, operator, approver):
    unknown_job("m1", irreversible_mail, MAIL)
    decisions.escalate(job_id="m1", version=latest_attempt("m1").version, user=approver, note="odd one")
    decisions.retry_reconciliation(job_id="m1", version=latest_attempt("m1").version, user=operator,
                                   note="ask the relay again")
    assert reconcile_job(job_id="m1").applied == "awaiting_approval"  # the relay never saw it
    request = ApprovalRequest.objects.get(job__job_id="m1")
    assert (request.requested_by, request.requested_by_actor) == (operator, "reconciler")
    with pytest.raises(approvals.ApprovalRefused, match="four eyes: olga requested this approval"):
        approvals.approve(request_id=request.pk, user=operator, note="I retried, I approve")
    # Who escalated it decided on the job too (issue 42): the history excludes them, not only the requester.
    with pytest.raises(approvals.ApprovalRefused, match=r"four eyes: abe escalated this job \(at .*\) and cannot"):
        approvals.approve(request_id=request.pk, user=approver, note="I escalated, I approve")
    approvals.approve(request_id=request.pk, user=_persona("fay", "approvers"), note="checked the relay's log")
    assert Job.objects.get(job_id="m1").status == "pending"
    assert_ledger_clean()


def test_with_nobody_behind_the_request_no_one_who_decided_on_the_job_may_approve(irreversible_mail, operator,
                                                                                  approver):
    unknown_job("m2", irreversible_mail, MAIL)
    decisions.mark_not_found(job_id="m2", version=latest_attempt("m2").version, user=operator, note="not sent")
    first = ApprovalRequest.objects.get(job__job_id="m2")
    approvals.approve(request_id=first.pk, user=approver, note="replay it")
    lease = services.claim_job(job_id="m2", worker="worker-b")  # the replay loses sight of its effect too
    services.begin_side_effect(lease=lease)
    services.record_unknown(lease=lease, reason="connection dropped after sending")

    assert reconcile_job(job_id="m2").applied == "awaiting_approval"
    second = ApprovalRequest.objects.get(job__job_id="m2", status="pending")
    assert second.requested_by is None  # the reconciler asked on its own
    with pytest.raises(approvals.ApprovalRefused, match="four eyes: abe approved a replay of this job"):
        approvals.approve(request_id=second.pk, user=approver, note="again")
    with pytest.raises(approvals.ApprovalRefused, match="four eyes: olga marked this job not found"):
        approvals.reject(request_id=second.pk, user=operator, note="no")
    second.refresh_from_db()
    assert second.status == "pending" and Job.objects.get(job_id="m2").status == "awaiting_approval"
    fresh = _persona("fay", "approvers")
    approvals.approve(request_id=second.pk, user=fresh, note="a third pair of eyes")
    assert latest_attempt("m2").number == 3
    assert_ledger_clean()


def test_a_comment_is_not_a_decision_its_author_may_still_approve(irreversible_mail, operator, approver):
    unknown_job("m3", irreversible_mail, MAIL)
    decisions.mark_not_found(job_id="m3", version=latest_attempt("m3").version, user=operator, note="not sent")
    approvals.approve(request_id=ApprovalRequest.objects.get(job__job_id="m3").pk, user=approver, note="replay")
    lease = services.claim_job(job_id="m3", worker="worker-b")
    services.begin_side_effect(lease=lease)
    services.record_unknown(lease=lease, reason="connection dropped after sending")
    assert reconcile_job(job_id="m3").applied == "awaiting_approval"
    second = ApprovalRequest.objects.get(job__job_id="m3", status="pending")
    fresh = _persona("fay", "approvers")
    services.comment_on_job(job_id="m3", author=fresh.username, actor_type="approver", text="the relay looks clean")
    approvals.approve(request_id=second.pk, user=fresh, note="a third pair of eyes, having commented")
    assert latest_attempt("m3").number == 3
