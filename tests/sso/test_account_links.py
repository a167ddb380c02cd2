"""Issue 42, item 4: a local account and its sign-in provider twin (`op_a` and `op_a@testidp`) are
one person once an administrator links them (`manage.py link_accounts`, on the admin trail): four
eyes refuses the twin, in the service and in the database. Unlinking, attaching a provider subject
to an account and retiring one are on the trail too; a bad request changes nothing."""

from datetime import timedelta

import pytest
from allauth.socialaccount.models import SocialAccount
from django.contrib.auth.models import Group, User
from django.core.management import CommandError, call_command
from django.db import IntegrityError, connection, transaction

from approvals import services as approvals
from approvals.identities import identities_of
from approvals.models import AccountLink, ApprovalRequest
from console.models import AdminAuditEntry
from ledger.actions import Action, _registry, register
from reconciliation import decisions
from sandbox.demo_actions import send_mail
from tests.conftest import _persona, latest_attempt
from tests.reconciliation.helpers import assert_ledger_clean, unknown_job

pytestmark = pytest.mark.django_db

ISSUER = "https://idp.example.test"


@pytest.fixture
def transfer():
    register(Action(name="test.linked_transfer", executor=send_mail, reversible=False,
                    lease_ttl=timedelta(seconds=30)))
    yield "test.linked_transfer"
    _registry.pop("test.linked_transfer")


@pytest.fixture
def twins(settings, admin_user):
    """op_a signs in with a password; op_a@testidp is the account her first provider sign-in made."""
    settings.RECKON_OIDC_PROVIDERS = {"testidp": ISSUER}
    local = _persona("op_a", "operators")
    local.groups.add(Group.objects.get_or_create(name="approvers")[0])
    twin = _persona("op_a@testidp", "approvers")
    SocialAccount.objects.create(user=twin, provider="testidp", uid="op_a", extra_data={"id_token": {"iss": ISSUER}})
    return local, twin


def link(*names: str, by: str = "root") -> str:
    from io import StringIO

    out = StringIO()
    call_command("link_accounts", "link", *names, "--by", by, stdout=out)
    return out.getvalue()


def test_linked_twins_are_one_person_for_four_eyes_in_the_service_and_the_database(transfer, twins, approver):
    local, twin = twins
    unknown_job("l1", transfer, {"to": "alice", "amount": 5})
    decisions.mark_not_found(job_id="l1", version=latest_attempt("l1").version, user=local, note="bank has none")
    request = ApprovalRequest.objects.get(job__job_id="l1", status="pending")
    assert f"account:{twin.pk}" not in request.excluded_identities  # opened before anyone linked them

    assert "op_a, op_a@testidp are one person" in link("op_a", "op_a@testidp")
    assert identities_of(twin) == identities_of(local) == sorted(
        [f"account:{local.pk}", f"account:{twin.pk}", f"{ISSUER}#op_a"])
    trail = AdminAuditEntry.objects.filter(object_type="approvals.accountlink")
    assert [(entry.actor, entry.action) for entry in trail] == [("root", "added"), ("root", "added")]

    with pytest.raises(approvals.ApprovalRefused, match=r"four eyes: op_a@testidp is the same person as op_a"):
        approvals.approve(request_id=request.pk, user=twin, note="my other account, fine")
    # Past the service, with no identities on the row: the database follows the link itself.
    with pytest.raises(IntegrityError, match="approval_four_eyes_history"), transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("UPDATE approvals_approvalrequest SET status = 'approved', decided_at = now(),"
                           " decided_by_id = %s, decided_by_identities = '{}', excluded_identities = '{}',"
                           " requested_by_identities = '{}' WHERE id = %s", [twin.pk, request.pk])
    request.refresh_from_db()
    assert request.status == "pending"
    approvals.approve(request_id=request.pk, user=approver, note="checked with the bank")
    assert latest_attempt("l1").number == 2
    assert_ledger_clean()


def test_links_chain_into_one_person_and_an_unlink_is_on_the_trail(twins):
    local, twin = twins
    third = _persona("op_a-old", None)
    link("op_a", "op_a@testidp")
    link("op_a-old", "op_a@testidp")
    assert set(AccountLink.objects.values_list("person", flat=True)) == {local.pk}
    assert identities_of(third) == identities_of(local)

    with pytest.raises(CommandError, match="already linked"):
        link("op_a", "op_a-old")
    call_command("link_accounts", "unlink", "op_a-old", "--by", "root")
    assert f"account:{third.pk}" not in identities_of(local)
    assert AdminAuditEntry.objects.filter(object_type="approvals.accountlink", action="deleted").count() == 1
    call_command("link_accounts", "unlink", "op_a", "--by", "root")  # one account alone is no link
    assert not AccountLink.objects.exists() and identities_of(local) == [f"account:{local.pk}"]


def test_bad_requests_are_refused_and_change_nothing(twins):
    entries = AdminAuditEntry.objects.count()
    for args, match in [
        (["link", "op_a", "op_a", "--by", "root"], "two different accounts"),
        (["link", "op_a", "nobody", "--by", "root"], "no account 'nobody'"),
        (["link", "op_a", "op_a@testidp", "--by", "nobody"], "no account 'nobody'"),
        (["unlink", "op_a", "--by", "root"], "linked to no other account"),
        (["subject", "op_a", "--provider", "elsewhere", "--subject", "x", "--by", "root"], "no identity provider"),
        (["subject", "op_a", "--provider", "testidp", "--subject", "op_a", "--by", "root"],
         "already signs in to op_a@testidp"),
    ]:
        with pytest.raises(CommandError, match=match):
            call_command("link_accounts", *args)
    User.objects.filter(username="root").update(is_active=False)
    with pytest.raises(CommandError, match="not an active user"):
        link("op_a", "op_a@testidp")
    assert not AccountLink.objects.exists() and AdminAuditEntry.objects.count() == entries
    assert SocialAccount.objects.count() == 1


def test_a_subject_attached_to_an_account_and_a_retired_twin_are_on_the_trail(twins):
    local, twin = twins
    call_command("link_accounts", "subject", "op_a", "--provider", "testidp", "--subject", "op-a-2", "--by", "root")
    attached = SocialAccount.objects.get(provider="testidp", uid="op-a-2")
    assert attached.user == local and f"{ISSUER}#op-a-2" in identities_of(local)
    assert AdminAuditEntry.objects.filter(object_type="socialaccount.socialaccount", action="added",
                                          actor="root").count() == 1

    call_command("link_accounts", "retire", "op_a@testidp", "--by", "root")
    twin.refresh_from_db()
    assert twin.is_active is False
    entry = AdminAuditEntry.objects.get(object_type="auth.user", object_pk=str(twin.pk))
    assert entry.changes["is_active"] == {"before": True, "after": False}
