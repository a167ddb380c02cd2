"""Mail over real SMTP through the worker loop, and its reconciliation by Message-ID.

Every send here is a real SMTP transaction with the SMTP sandbox process; the faults are the
server's. What a test counts afterwards is the archive: how many messages carry the job's
Message-ID, which is what a recipient would have received.
"""

import smtplib

import pytest

from ledger import runtime, services
from ledger.models import Job, LedgerEvent
from ledger.smtp import compose, message_id_for
from reconciliation.models import ReconciliationCheck
from reconciliation.passes import reconcile_job
from sandbox.testing import free_port
from tests.conftest import latest_attempt, make_job
from tests.reconciliation.helpers import assert_ledger_clean

pytestmark = pytest.mark.django_db

ACTION = "smtp.send_mail"
MAIL = {"to": "ann@example.com", "subject": "Your receipt", "body": "Thank you for your order."}


def _key(job_id: str) -> str:
    return f"{ACTION}:{job_id}"


def _archived(smtp, job_id: str) -> list[dict]:
    return smtp.messages(message_id=message_id_for(_key(job_id)))


def test_a_send_dropped_after_data_is_unknown_then_confirmed_and_never_resent(smtp_sandbox):
    smtp_sandbox.configure_faults(markers={_key("m1"): "drop_after_data"})
    make_job("m1", action=ACTION, payload=MAIL)
    assert runtime.run_job("m1") == "unknown"
    attempt = latest_attempt("m1")
    assert (attempt.execution_state, attempt.side_effect_state) == ("unknown", "ambiguous")
    assert Job.objects.get(job_id="m1").status == "needs_reconciliation"
    assert len(_archived(smtp_sandbox, "m1")) == 1  # the server has it; the worker could not know

    decision = reconcile_job(job_id="m1")
    assert (decision.outcome, decision.applied) == ("confirmed", "succeeded")
    attempt = latest_attempt("m1")
    assert attempt.number == 1 and attempt.states == {"delivery": "acknowledged", "execution": "succeeded",
                                                      "side_effect": "confirmed"}
    assert attempt.result_ref == message_id_for(_key("m1"))
    assert Job.objects.get(job_id="m1").status == "succeeded"
    [found] = ReconciliationCheck.objects.get(job__job_id="m1").evidence["found"]
    assert found["message_id"] == attempt.result_ref and "body" not in found  # a summary, not the text

    # Never resent: another delivery of the job is refused, and the archive still holds one.
    smtp_sandbox.configure_faults()
    assert runtime.run_job("m1").startswith("refused:")
    assert len(_archived(smtp_sandbox, "m1")) == 1
    assert_ledger_clean()


def test_a_send_dropped_before_data_completed_is_unknown_then_not_found_and_resent_once(smtp_sandbox):
    smtp_sandbox.configure_faults(markers={_key("m2"): "drop_during_data"})
    make_job("m2", action=ACTION, payload=MAIL)
    assert runtime.run_job("m2") == "unknown"
    assert _archived(smtp_sandbox, "m2") == []

    decision = reconcile_job(job_id="m2")
    assert (decision.outcome, decision.applied) == ("not_found", "replayed")
    note = LedgerEvent.objects.get(job__job_id="m2", kind="reconciled_not_found").note
    assert f"no message with Message-ID {message_id_for(_key('m2'))} in the archive" in note
    assert "never completed DATA" in note
    first = latest_attempt("m2")
    assert (first.number, first.execution_state) == (2, "not_started")

    smtp_sandbox.configure_faults()  # the network is back
    assert runtime.run_job("m2") == "succeeded"
    assert runtime.run_job("m2").startswith("refused:")
    [message] = _archived(smtp_sandbox, "m2")
    assert message["marker"] == _key("m2")
    job = Job.objects.get(job_id="m2")
    assert job.status == "succeeded" and latest_attempt("m2").result_ref == message_id_for(_key("m2"))
    assert [a.execution_state for a in job.attempts.order_by("number")] == ["failed", "succeeded"]
    assert_ledger_clean()


def test_a_connection_dropped_before_data_fails_the_attempt_and_the_retry_sends_once(smtp_sandbox):
    smtp_sandbox.configure_faults(recipients={"ann@example.com": "drop_before_data"})
    make_job("m3", action=ACTION, payload=MAIL)
    assert runtime.run_job("m3") == "failed"
    first = Job.objects.get(job_id="m3").attempts.get(number=1)
    assert (first.execution_state, first.side_effect_state) == ("failed", "not_found")
    assert Job.objects.get(job_id="m3").status == "pending"  # retryable: nothing left the client
    assert not ReconciliationCheck.objects.filter(job__job_id="m3").exists()

    smtp_sandbox.configure_faults()
    assert runtime.run_job("m3") == "succeeded"
    assert len(_archived(smtp_sandbox, "m3")) == 1
    assert_ledger_clean()


def test_a_refused_recipient_fails_the_job_for_good(smtp_sandbox):
    smtp_sandbox.configure_faults(recipients={"ann@example.com": "reject_rcpt"})
    make_job("m4", action=ACTION, payload=MAIL)
    assert runtime.run_job("m4") == "failed"
    job = Job.objects.get(job_id="m4")
    assert job.status == "failed" and job.attempts.count() == 1 and "550" in latest_attempt("m4").error
    assert smtp_sandbox.messages() == []
    assert_ledger_clean()


def test_an_archive_that_does_not_answer_proves_nothing(smtp_sandbox, settings):
    smtp_sandbox.configure_faults(markers={_key("m5"): "drop_during_data"})
    make_job("m5", action=ACTION, payload=MAIL)
    assert runtime.run_job("m5") == "unknown"
    settings.RECKON_SMTP_LOOKUP_URL = f"http://127.0.0.1:{free_port()}"
    decision = reconcile_job(job_id="m5")
    assert decision.outcome == "unavailable"
    job = Job.objects.get(job_id="m5")
    assert job.status == "needs_reconciliation" and job.attempts.count() == 1
    assert latest_attempt("m5").execution_state == "unknown"
    assert "the mail archive gave no answer" in ReconciliationCheck.objects.get(job=job).error
    assert_ledger_clean()


def test_two_messages_with_the_job_s_message_id_are_a_conflict_for_a_person(smtp_sandbox):
    smtp_sandbox.configure_faults(markers={_key("m6"): "drop_after_data"})
    make_job("m6", action=ACTION, payload=MAIL)
    assert runtime.run_job("m6") == "unknown"
    # Someone else resent it by hand, outside Reckon, with the same Message-ID.
    smtp_sandbox.configure_faults()
    message = compose(sender="ops@example.com", to=MAIL["to"], subject=MAIL["subject"], body=MAIL["body"],
                      marker=_key("m6"))
    with smtplib.SMTP(smtp_sandbox.host, smtp_sandbox.smtp_port, timeout=5) as client:
        client.send_message(message)
    assert len(_archived(smtp_sandbox, "m6")) == 2

    decision = reconcile_job(job_id="m6")
    assert (decision.outcome, decision.applied) == ("conflict", "escalated")
    assert "2 messages with Message-ID" in LedgerEvent.objects.get(job__job_id="m6", kind="reconciled_conflict").note
    assert len(_archived(smtp_sandbox, "m6")) == 2  # nothing more was sent
    assert_ledger_clean()


def test_a_message_that_differs_from_the_job_is_a_conflict(smtp_sandbox):
    smtp_sandbox.configure_faults(markers={_key("m7"): "drop_after_data"})
    make_job("m7", action=ACTION, payload=MAIL)
    lease = services.claim_job(job_id="m7", worker="w1")
    services.begin_side_effect(lease=lease)
    # The worker sent a different subject than the job's payload says (a changed template, say).
    message = compose(sender="reckon@localhost", to=MAIL["to"], subject="Something else", body=MAIL["body"],
                      marker=_key("m7"))
    with smtplib.SMTP(smtp_sandbox.host, smtp_sandbox.smtp_port, timeout=5) as client:
        with pytest.raises(smtplib.SMTPServerDisconnected):
            client.send_message(message)
    services.record_unknown(lease=lease, reason="connection dropped after DATA")

    decision = reconcile_job(job_id="m7")
    assert (decision.outcome, decision.applied) == ("conflict", "escalated")
    event = LedgerEvent.objects.get(job__job_id="m7", kind="reconciled_conflict")
    assert event.evidence["differences"]["subject"] == {"expected": "Your receipt", "archive": "Something else"}
    assert_ledger_clean()
