"""Issue 42, item 1 (and the review's gaps): four eyes holds for the job's whole history, not for one approval request.

After a request expires, a colleague's routine "Ask for approval again" makes the colleague the
requester; the person who caused the replay (marked it not found, wrote the corrected payload,
answered not found with their own token) still cannot approve it, under another name too, and
neither through the service nor in the database. Another approver can."""

from datetime import timedelta

import pytest
from django.contrib.auth.models import Group
from django.db import IntegrityError, connection, transaction

from api.tokens import worker_token_create
from approvals import services as approvals
from approvals.models import ApprovalRequest
from console.models import TenantScope
from ledger import services
from ledger.actions import Action, _registry, register
from ledger.declarations import load_actions_file
from ledger.models import Job, LedgerEvent
from reconciliation import decisions
from sandbox.demo_actions import send_mail
from tests.api.conftest import ApiClient, ledger_state
from tests.conftest import _persona, latest_attempt, make_job
from tests.console.test_admin import _submit
from tests.reconciliation.helpers import assert_ledger_clean, unknown_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def transfer():
    """An irreversible action nobody can query: a person says what happened, a second one approves."""
    register(Action(name="test.transfer", executor=send_mail, reversible=False, lease_ttl=timedelta(seconds=30)))
    yield "test.transfer"
    _registry.pop("test.transfer")


@pytest.fixture
def pull_wire(tmp_path):
    path = tmp_path / "actions.toml"
    path.write_text('[actions."pull.wire"]\nexecutor = "external"\nreversible = false\nqueryable = true\n'
                    'reconciler = "external"\n')
    load_actions_file(path, required=True)
    yield "pull.wire"
    _registry.pop("pull.wire")


@pytest.fixture
def olga(operator):
    """An operator who is an approver too: she may approve other people's replays."""
    operator.groups.add(Group.objects.get_or_create(name="approvers")[0])
    return operator


@pytest.fixture
def colleague(db):
    return _persona("otto", "operators")


def _expire_and_ask_again(job_id: str, colleague) -> ApprovalRequest:
    """The pending request runs out; a colleague asks again, and becomes its requester."""
    with connection.cursor() as cursor:
        cursor.execute("UPDATE approvals_approvalrequest SET expires_at = now() - interval '1 minute'"
                       " WHERE status = 'pending'")
    assert approvals.expire_due_approvals() == 1
    decisions.request_approval(job_id=job_id, version=latest_attempt(job_id).version, user=colleague,
                               note="the first request ran out")
    again = ApprovalRequest.objects.get(job__job_id=job_id, status="pending")
    assert again.requested_by == colleague
    return again


def _refused(request: ApprovalRequest, user, match: str) -> None:
    """The approval is refused with `match`, and nothing in the ledger changed."""
    before, events = ledger_state(), LedgerEvent.objects.count()
    with pytest.raises(approvals.ApprovalRefused, match=match):
        approvals.approve(request_id=request.pk, user=user, note="looks fine to me")
    request.refresh_from_db()
    assert request.status == "pending" and request.decided_by is None
    assert ledger_state() == before and LedgerEvent.objects.count() == events


def test_who_marked_it_not_found_cannot_approve_it_after_a_colleague_asks_again(transfer, olga, colleague,
                                                                              approver):
    unknown_job("t1", transfer, {"to": "alice", "amount": 5})
    decisions.mark_not_found(job_id="t1", version=latest_attempt("t1").version, user=olga, note="bank has none")
    again = _expire_and_ask_again("t1", colleague)

    _refused(again, olga, r"four eyes: olga marked this job not found \(at .+ UTC\) and cannot approve it; "
                          "another approver must decide")
    approvals.approve(request_id=again.pk, user=approver, note="checked with the bank")
    assert (latest_attempt("t1").number, Job.objects.get(job_id="t1").status) == (2, "pending")
    assert_ledger_clean()


def test_who_wrote_the_corrected_payload_cannot_approve_sending_it(transfer, olga, colleague, approver):
    make_job("t2", action=transfer, payload={"to": "alice", "amount": 5})
    services.record_failure(lease=services.claim_job(job_id="t2", worker="w"), error="400: account closed")
    decisions.retry_corrected(job_id="t2", version=latest_attempt("t2").version, user=olga, note="new account",
                              payload={"to": "mallory", "amount": 5000})
    again = _expire_and_ask_again("t2", colleague)
    assert again.payload_digest == approvals.payload_digest({"to": "mallory", "amount": 5000})

    _refused(again, olga, r"four eyes: olga wrote the payload this replay would send \(at .+\) and cannot")
    approvals.approve(request_id=again.pk, user=approver, note="mallory's account checked")
    assert latest_attempt("t2").number == 2
    assert_ledger_clean()


def test_who_issued_the_pull_token_that_answered_not_found_cannot_approve(client, pull_wire, admin_user, colleague,
                                                                          approver):
    issued = worker_token_create(name="root's agent", tenants=["*"], actions=["*"], created_by=admin_user)
    unknown_job("t3", pull_wire, {"amount_cents": 100})
    agent = ApiClient(issued.token)
    claimed = agent.post("/api/v1/reconciliations/claim", {"agent": "mcp-desktop"}).json
    answered = agent.post(f"/api/v1/reconciliations/{claimed['reconciliation_id']}/outcome",
                          {"agent": "mcp-desktop", "outcome": "not_found", "reason": "no wire with this key"})
    assert answered.json["applied"] == "awaiting_approval"
    again = _expire_and_ask_again("t3", colleague)

    prefix = issued.worker_token.prefix
    _refused(again, admin_user, rf"four eyes: root issued the worker token of mcp-desktop \[token root's-agent "
                                rf"{prefix}\], a worker that answered not found for this job \(at .+\) and cannot")
    TenantScope.objects.create(user=admin_user, all_tenants=True)
    client.force_login(admin_user)  # the console says the same, and changes nothing
    said = client.post(f"/approvals/{again.pk}/decide/", {"decision": "approve", "note": "fine"}, follow=True)
    assert "four eyes: root issued the worker token" in said.content.decode()
    assert ApprovalRequest.objects.get(pk=again.pk).status == "pending"
    approvals.approve(request_id=again.pk, user=approver, note="checked the bank")
    assert Job.objects.get(job_id="t3").status == "pending"
    assert_ledger_clean()


def test_a_rename_in_the_admin_does_not_lift_the_exclusion(client, transfer, olga, colleague, admin_user):
    unknown_job("t4", transfer, {"to": "alice", "amount": 5})
    decisions.mark_not_found(job_id="t4", version=latest_attempt("t4").version, user=olga, note="bank has none")
    client.force_login(admin_user)
    _submit(client, f"/admin/auth/user/{olga.pk}/change/", "user_form", username="olga.k")
    olga.refresh_from_db()
    assert olga.username == "olga.k"
    again = _expire_and_ask_again("t4", colleague)

    # Matched on her account: the event she made under her old name is still hers.
    _refused(again, olga, r"four eyes: olga.k marked this job not found \(at .+\) and cannot")


def test_the_database_refuses_a_decision_by_someone_the_history_excludes(transfer, olga, colleague):
    unknown_job("t5", transfer, {"to": "alice", "amount": 5})
    decisions.mark_not_found(job_id="t5", version=latest_attempt("t5").version, user=olga, note="bank has none")
    again = _expire_and_ask_again("t5", colleague)
    assert f"account:{olga.pk}" in again.excluded_identities and f"account:{colleague.pk}" in again.excluded_identities
    with pytest.raises(IntegrityError, match="approval_four_eyes_history"), transaction.atomic():
        with connection.cursor() as cursor:  # past the service, and without her identities on the row
            cursor.execute("UPDATE approvals_approvalrequest SET status = 'approved', decided_at = now(),"
                           " decided_by_id = %s, excluded_identities = '{}' WHERE id = %s", [olga.pk, again.pk])
    again.refresh_from_db()
    assert again.status == "pending"


def test_a_rename_in_the_admin_before_any_request_does_not_lift_the_exclusion(client, transfer, olga, approver,
                                                                            admin_user):
    """Events name people by username: abe's escalation still names him after /admin/ calls him abe.k,
    though no approval request recorded his account before the rename."""
    unknown_job("t6", transfer, {"to": "alice", "amount": 5})
    decisions.escalate(job_id="t6", version=latest_attempt("t6").version, user=approver, note="the bank is odd")
    client.force_login(admin_user)
    _submit(client, f"/admin/auth/user/{approver.pk}/change/", "user_form", username="abe.k")
    approver.refresh_from_db()
    assert approver.username == "abe.k" and not ApprovalRequest.objects.exists()
    decisions.mark_not_found(job_id="t6", version=latest_attempt("t6").version, user=olga, note="bank has none")
    request = ApprovalRequest.objects.get(job__job_id="t6", status="pending")

    _refused(request, approver, r"four eyes: abe.k escalated this job \(at .+\) and cannot approve it")
    assert f"account:{approver.pk}" in request.excluded_identities  # and so the database refuses him too
    # A newcomer who takes the name abe did not escalate anything: the account decides, not the name.
    newcomer = _persona("abe", "approvers")
    approvals.approve(request_id=request.pk, user=newcomer, note="I was not here when it was escalated")
    assert latest_attempt("t6").number == 2


def test_a_hold_is_no_decision_who_only_held_the_job_may_approve(transfer, olga, approver):
    unknown_job("t7", transfer, {"to": "alice", "amount": 5})
    decisions.mark_not_found(job_id="t7", version=latest_attempt("t7").version, user=olga, note="bank has none")
    request = ApprovalRequest.objects.get(job__job_id="t7", status="pending")
    services.take_job(job_id="t7", holder=approver.username, note="I'll look at the bank's statement")
    services.release_job(job_id="t7", actor=approver.username, note="statement checked")
    services.comment_on_job(job_id="t7", author=approver.username, actor_type="approver", text="no transfer on it")
    assert {"job_taken", "job_released", "job_commented"} <= set(LedgerEvent.objects.filter(
        job__job_id="t7", actor=approver.username).values_list("kind", flat=True))

    approvals.approve(request_id=request.pk, user=approver, note="held and commented, never decided")
    assert latest_attempt("t7").number == 2
    assert_ledger_clean()
