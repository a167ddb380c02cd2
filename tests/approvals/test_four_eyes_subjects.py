"""Four eyes on the people behind the accounts: one identity-provider subject linked to two
accounts is one person, in the services and in the database."""

import pytest
from allauth.socialaccount.models import SocialAccount
from django.db import IntegrityError, connection, transaction

from approvals import services as approvals
from approvals.models import ApprovalRequest
from ledger.models import Job, LedgerEvent
from reconciliation import decisions
from tests.conftest import _persona, latest_attempt
from tests.reconciliation.helpers import assert_ledger_clean, unknown_job

pytestmark = pytest.mark.django_db

ISSUER = "https://sso.example.com/realms/acme"


def link(user, provider: str, subject: str, issuer: str = ISSUER) -> None:
    SocialAccount.objects.create(user=user, provider=provider, uid=subject, extra_data={"id_token": {"iss": issuer}})


@pytest.fixture
def requested(provider, operator) -> ApprovalRequest:
    link(operator, "keycloak", "f3a9-olga")
    unknown_job("v1", "vault.rotate_credential", {"name": "db-password"})
    decisions.mark_not_found(job_id="v1", version=latest_attempt("v1").version, user=operator, note="no rotation")
    return ApprovalRequest.objects.get(job__job_id="v1")


def test_the_request_records_the_requesters_account_and_subject(requested, operator):
    assert requested.requested_by_identities == sorted([f"account:{operator.pk}", f"{ISSUER}#f3a9-olga"])


def test_one_subject_behind_two_accounts_cannot_approve_its_own_request(requested):
    # The same person at the same provider, reached through a second provider entry and account.
    second = _persona("olga-approver", "approvers")
    link(second, "keycloak-eu", "f3a9-olga", issuer=ISSUER + "/")
    with pytest.raises(approvals.ApprovalRefused, match=r"four eyes: olga-approver is the same person as olga"):
        approvals.approve(request_id=requested.pk, user=second, note="looks fine")
    requested.refresh_from_db()
    assert requested.status == "pending" and Job.objects.get(job_id="v1").status == "awaiting_approval"
    assert not LedgerEvent.objects.filter(job__job_id="v1", kind="approval_granted").exists()


def test_the_database_refuses_an_approval_by_the_same_subject(requested, approver):
    with pytest.raises(IntegrityError, match="approval_four_eyes_identities"), transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE approvals_approvalrequest SET status = 'approved', decided_at = now(), decided_by_id = %s,"
                " decided_by_identities = ARRAY[%s]::varchar[] WHERE id = %s",
                [approver.pk, f"{ISSUER}#f3a9-olga", requested.pk],
            )


def test_the_approval_event_records_the_approvers_provider_and_subject(requested, approver):
    link(approver, "keycloak", "77b1-abe")
    approvals.approve(request_id=requested.pk, user=approver, note="checked with the DBA")
    requested.refresh_from_db()
    assert requested.decided_by_identities == sorted([f"account:{approver.pk}", f"{ISSUER}#77b1-abe"])
    granted = LedgerEvent.objects.get(job__job_id="v1", kind="approval_granted")
    assert granted.evidence["approver"] == {"username": "abe", "provider": "keycloak", "issuer": ISSUER,
                                            "subject": "77b1-abe"}
    assert_ledger_clean()


def test_a_break_glass_approver_is_known_by_the_local_account(requested, admin_user):
    approvals.approve(request_id=requested.pk, user=admin_user, note="break-glass, provider down")
    granted = LedgerEvent.objects.get(job__job_id="v1", kind="approval_granted")
    assert granted.evidence["approver"]["provider"] == "password"
    assert granted.evidence["approver"]["subject"] == f"account:{admin_user.pk}"
