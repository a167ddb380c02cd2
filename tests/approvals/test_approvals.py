"""Four eyes before an irreversible replay: in the services, and in the database itself."""

import pytest
from django.db import IntegrityError, connection, transaction

from approvals import services as approvals
from approvals.models import ApprovalRequest
from ledger.models import Job, LedgerEvent
from reconciliation import decisions
from tests.conftest import latest_attempt
from tests.reconciliation.helpers import assert_ledger_clean, unknown_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def requested(provider, operator) -> ApprovalRequest:
    """A vault rotation whose effect the operator declared not found: replay awaits approval."""
    unknown_job("v1", "vault.rotate_credential", {"name": "db-password"})
    decisions.mark_not_found(
        job_id="v1",
        version=latest_attempt("v1").version,
        user=operator,
        note="vault audit log shows no rotation",
    )
    return ApprovalRequest.objects.get(job__job_id="v1")


def test_the_request_binds_to_the_payload_and_the_requester(requested, operator):
    assert requested.status == "pending" and requested.requested_by == operator
    assert requested.payload_digest == approvals.payload_digest({"name": "db-password"})
    assert len(requested.payload_digest) == 64 and requested.expires_at > requested.created_at


def test_approval_by_another_person_replays_with_the_same_key(requested, approver):
    approvals.approve(request_id=requested.pk, user=approver, note="confirmed with the DBA")
    requested.refresh_from_db()
    assert (requested.status, requested.decided_by, requested.decision_note) == (
        "approved",
        approver,
        "confirmed with the DBA",
    )
    job = Job.objects.get(job_id="v1")
    assert job.status == "pending" and latest_attempt("v1").number == 2
    granted = LedgerEvent.objects.get(job=job, kind="approval_granted")
    assert (granted.actor_type, granted.actor) == ("approver", "abe")
    assert LedgerEvent.objects.filter(job=job).last().kind == "attempt_opened"
    assert_ledger_clean()


def test_the_requester_cannot_approve_their_own_request(requested, operator):
    with pytest.raises(approvals.ApprovalRefused, match="four eyes: olga requested this approval"):
        approvals.approve(request_id=requested.pk, user=operator, note="me again")
    requested.refresh_from_db()
    assert requested.status == "pending" and Job.objects.get(job_id="v1").status == "awaiting_approval"


def test_the_database_refuses_an_approval_by_the_requester(requested):
    with pytest.raises(IntegrityError, match="approval_four_eyes"), transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE approvals_approvalrequest SET status = 'approved', decided_at = now(),"
                " decided_by_id = requested_by_id WHERE id = %s",
                [requested.pk],
            )


def test_the_database_refuses_a_raw_insert_decided_by_the_requester(requested, operator):
    with pytest.raises(IntegrityError, match="approval_four_eyes"), transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO approvals_approvalrequest (job_id, attempt_id, requested_by_id, requested_by_actor,"
                " reason, status, decided_by_id, decided_at, decision_note, expires_at, created_at,"
                " payload_digest, evidence) SELECT job_id, attempt_id, %s, 'olga', 'r', 'approved', %s, now(),"
                " '', now(), now(), payload_digest, '{}' FROM approvals_approvalrequest WHERE id = %s",
                [operator.pk, operator.pk, requested.pk],
            )


def test_at_most_one_pending_request_per_job(requested):
    with pytest.raises(IntegrityError, match="approval_one_pending_per_job"), transaction.atomic():
        ApprovalRequest.objects.create(
            job=requested.job,
            attempt=requested.attempt,
            requested_by_actor="x",
            reason="again",
            expires_at=requested.expires_at,
            payload_digest=requested.payload_digest,
        )


def test_a_changed_payload_is_refused(requested, approver):
    Job.objects.filter(pk=requested.job_id).update(payload={"name": "root-password"})  # tampering
    with pytest.raises(approvals.ApprovalRefused, match="payload changed"):
        approvals.approve(request_id=requested.pk, user=approver, note="ok")
    assert latest_attempt("v1").number == 1


def test_rejection_cancels_the_job_and_keeps_the_attempt(requested, approver):
    approvals.reject(request_id=requested.pk, user=approver, note="rotate by hand instead")
    job = Job.objects.get(job_id="v1")
    assert job.status == "cancelled" and job.attempts.count() == 1
    assert latest_attempt("v1").states["execution"] == "failed"
    assert LedgerEvent.objects.filter(job=job).last().kind == "approval_rejected"
    with pytest.raises(approvals.ApprovalRefused, match="already rejected by abe"):
        approvals.approve(request_id=requested.pk, user=approver, note="changed my mind")
    assert_ledger_clean()


def test_withdrawal_puts_the_job_in_front_of_an_operator(requested, operator):
    approvals.withdraw(request_id=requested.pk, user=operator, note="asked the wrong person")
    requested.refresh_from_db()
    assert requested.status == "withdrawn" and requested.decided_by is None
    assert Job.objects.get(job_id="v1").status == "needs_operator"
    again = approvals.request_approval(job_id="v1", user=operator, reason="second try")
    assert again.status == "pending"
    assert_ledger_clean()


def test_expired_requests_are_closed(requested, approver):
    with connection.cursor() as cursor:  # let the request's time run out
        cursor.execute("UPDATE approvals_approvalrequest SET expires_at = now() - interval '1 minute'")
    with pytest.raises(approvals.ApprovalRefused, match="expired"):
        approvals.approve(request_id=requested.pk, user=approver, note="late")
    assert approvals.expire_due_approvals() == 1
    requested.refresh_from_db()
    assert requested.status == "expired" and Job.objects.get(job_id="v1").status == "needs_operator"
    assert LedgerEvent.objects.filter(job__job_id="v1").last().actor_type == "system"
    assert_ledger_clean()


def test_a_decision_needs_a_note(requested, approver):
    with pytest.raises(approvals.ApprovalRefused, match="a note is required"):
        approvals.approve(request_id=requested.pk, user=approver, note="")
