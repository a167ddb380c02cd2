"""Applying what the reconciler found, through the transition layer, against the real sandbox."""

from datetime import timedelta

import pytest
from django.core.management import call_command

from approvals.models import ApprovalRequest
from ledger import services
from ledger.actions import Action, _registry, register
from ledger.models import Job, LedgerEvent
from reconciliation import decisions
from reconciliation.models import ReconciliationCheck
from reconciliation.passes import reconcile_job, reconcile_until_idle
from sandbox.demo_actions import send_mail
from sandbox.testing import free_port
from tests.conftest import event_kinds, latest_attempt
from tests.reconciliation.helpers import (
    INVOICE,
    MAIL,
    assert_ledger_clean,
    create_invoice,
    send_message,
    unknown_job,
)

pytestmark = pytest.mark.django_db

MSG = "mail.send"


@pytest.fixture
def irreversible_mail(provider):
    """A queryable action that must not be replayed without a second person's approval."""
    register(
        Action(
            name="test.irreversible_mail",
            executor=send_mail,
            reversible=False,
            queryable=True,
            reconciler="sandbox.reconcilers.mail",
            lease_ttl=timedelta(seconds=30),
        )
    )
    yield "test.irreversible_mail"
    _registry.pop("test.irreversible_mail")


def test_confirmed_closes_the_attempt_and_the_job_without_replay(provider):
    unknown_job("m1", MSG, MAIL)
    message = send_message(provider, f"{MSG}:m1")
    [decision] = reconcile_until_idle()
    assert (decision.outcome, decision.applied) == ("confirmed", "succeeded")
    attempt = latest_attempt("m1")
    assert attempt.number == 1 and attempt.states == {
        "delivery": "acknowledged",
        "execution": "succeeded",
        "side_effect": "confirmed",
    }
    assert attempt.result_ref == message["message_id"]
    assert Job.objects.get(job_id="m1").status == "succeeded"
    event = LedgerEvent.objects.filter(job__job_id="m1").last()
    assert (event.kind, event.actor_type) == ("reconciled_confirmed", "reconciler")
    with pytest.raises(services.ClaimRefused):
        services.claim_job(job_id="m1", worker="late")
    assert provider.effects(marker=f"{MSG}:m1")["count"] == 1
    assert_ledger_clean()


def test_not_found_replays_a_reversible_action_with_the_same_key(provider):
    unknown_job("i1", "billing.create_invoice", INVOICE)
    [decision] = reconcile_until_idle()
    assert decision.applied == "replayed"
    first, second = latest_attempt("i1").job.attempts.order_by("number")
    assert (first.execution_state, first.side_effect_state) == ("failed", "not_found")
    assert (second.number, second.execution_state) == (2, "not_started")
    job = Job.objects.get(job_id="i1")
    assert job.status == "pending" and job.idempotency_key == "billing.create_invoice:i1"
    assert "provider has no invoice" in LedgerEvent.objects.get(job=job, kind="reconciled_not_found").note
    # The replay runs through the normal worker loop and creates exactly one invoice.
    lease = services.claim_job(job_id="i1", worker="w2")
    services.begin_side_effect(lease=lease)
    invoice = create_invoice(provider, job.idempotency_key)
    services.record_success(lease=lease, result_ref=invoice["id"])
    assert provider.effects(key=job.idempotency_key)["count"] == 1
    assert_ledger_clean()


def test_not_found_on_the_last_attempt_fails_the_job(provider):
    unknown_job("m1", MSG, MAIL)
    for number in (1, 2):
        reconcile_until_idle()
        lease = services.claim_job(job_id="m1", worker=f"w{number}")
        services.begin_side_effect(lease=lease)
        services.record_unknown(lease=lease, reason="dropped again")
    [decision] = reconcile_until_idle()
    assert decision.applied == "failed" and Job.objects.get(job_id="m1").status == "failed"
    assert event_kinds("m1")[-1] == "attempts_exhausted"
    assert_ledger_clean()


def test_not_found_on_an_irreversible_action_asks_for_approval(irreversible_mail):
    unknown_job("v1", irreversible_mail, MAIL)
    [decision] = reconcile_until_idle()
    assert decision.applied == "awaiting_approval"
    job = Job.objects.get(job_id="v1")
    assert job.status == "awaiting_approval" and job.attempts.count() == 1
    request = ApprovalRequest.objects.get(job=job)
    assert request.status == "pending" and request.requested_by is None
    assert request.requested_by_actor == "reconciler" and "approval" in request.reason
    assert_ledger_clean()


def test_conflict_escalates_and_keeps_the_evidence(provider):
    unknown_job("m1", MSG, MAIL)
    send_message(provider, f"{MSG}:m1", {**MAIL, "subject": "Wrong"})
    [decision] = reconcile_until_idle()
    assert decision.applied == "escalated"
    job = Job.objects.get(job_id="m1")
    assert job.status == "escalated" and latest_attempt("m1").execution_state == "unknown"
    event = LedgerEvent.objects.get(job=job, kind="reconciled_conflict")
    assert event.evidence["differences"]["subject"] == {"expected": "Hello", "provider": "Wrong"}
    assert event.evidence["lookups"][0]["found"][0]["subject"] == "Wrong"
    assert reconcile_until_idle() == []  # nothing automatic happens any more
    assert_ledger_clean()


def test_unavailable_keeps_the_attempt_unknown_and_schedules_the_next_look(provider, settings):
    unknown_job("m1", MSG, MAIL)
    settings.RECKON_MAIL_URL = f"http://127.0.0.1:{free_port()}"
    [decision] = reconcile_until_idle()
    assert decision.outcome == "unavailable"
    job = Job.objects.get(job_id="m1")
    assert job.status == "needs_reconciliation" and job.check_count == 1 and job.next_check_at is not None
    assert latest_attempt("m1").execution_state == "unknown"
    assert reconcile_until_idle() == []  # not due yet
    check = ReconciliationCheck.objects.get(job=job)
    assert check.outcome == "unavailable" and "could not connect" in check.error
    assert_ledger_clean()


def test_an_action_that_cannot_be_queried_goes_to_an_operator_at_once(provider):
    unknown_job("v1", "vault.rotate_credential", {"name": "db-password"})
    [decision] = reconcile_until_idle()
    assert (decision.outcome, decision.applied) == ("not_queryable", "needs_operator")
    job = Job.objects.get(job_id="v1")
    assert job.status == "needs_operator" and not ReconciliationCheck.objects.filter(job=job).exists()
    assert "cannot be queried" in LedgerEvent.objects.get(job=job, kind="not_queryable").note
    assert_ledger_clean()


def test_a_look_at_a_job_that_moved_on_changes_nothing(provider, operator):
    unknown_job("m1", MSG, MAIL)
    job = Job.objects.get(job_id="m1")
    decisions.escalate(job_id="m1", version=latest_attempt("m1").version, user=operator, note="mine")
    decision = reconcile_job(job_id="m1")
    assert decision.outcome == "superseded" and Job.objects.get(pk=job.pk).status == "escalated"
    assert_ledger_clean()


def test_the_command_prints_each_decision(provider, capsys):
    unknown_job("m1", MSG, MAIL)
    unknown_job("m2", MSG, MAIL)
    send_message(provider, f"{MSG}:m1")
    call_command("reconcile", "--once")
    out = capsys.readouterr().out
    assert "m1: confirmed -> succeeded" in out and "m2: not_found -> replayed" in out
    assert "reconciled 2 job(s)" in out
