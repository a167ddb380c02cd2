"""`smtp.send_mail` against the real SMTP sandbox: how each way a send can end is classified."""

import socket
import threading

import pytest

from ledger.actions import Failed, Succeeded, Unknown, get_action
from ledger.models import Job
from ledger.smtp import message_id_for
from sandbox.testing import free_port
from tests.conftest import make_job

pytestmark = pytest.mark.django_db

ACTION = "smtp.send_mail"
MAIL = {"to": "ann@example.com", "subject": "Your receipt", "body": "Thank you for your order."}


def _send(job_id: str, payload: dict = MAIL):
    job = make_job(job_id, action=ACTION, payload=payload)
    return get_action(ACTION).executor(Job.objects.get(pk=job.pk))


def test_accepted_is_succeeded_with_the_message_id_as_result(smtp_sandbox):
    outcome = _send("s-1")
    message_id = message_id_for(f"{ACTION}:s-1")
    assert isinstance(outcome, Succeeded) and outcome.result_ref == message_id
    assert outcome.evidence["code"] == 250
    [message] = smtp_sandbox.messages(message_id=message_id)
    assert message["marker"] == f"{ACTION}:s-1" and ["X-Reckon-Marker", f"{ACTION}:s-1"] in message["headers"]
    assert (message["to"], message["subject"], message["body"]) == (["ann@example.com"], "Your receipt",
                                                                    "Thank you for your order.\n")


def test_the_message_id_is_the_same_for_every_attempt_and_differs_between_jobs():
    assert message_id_for("smtp.send_mail:a") == message_id_for("smtp.send_mail:a")
    assert message_id_for("smtp.send_mail:a") != message_id_for("smtp.send_mail:b")
    assert message_id_for("smtp.send_mail:ä b/c").endswith("@reckon>")


def test_non_ascii_text_and_a_long_subject_arrive_as_written(smtp_sandbox):
    payload = {"to": "Zoë <zoe@example.com>", "subject": " ".join(["Bestätigung"] * 12), "body": "Grüße\n.und Punkt\n"}
    assert isinstance(_send("s-2", payload), Succeeded)
    [message] = smtp_sandbox.messages(marker=f"{ACTION}:s-2")
    assert (message["to"], message["subject"], message["body"]) == (["zoe@example.com"], payload["subject"],
                                                                    payload["body"])


def test_a_refused_connection_sent_nothing_and_is_retryable(smtp_sandbox, settings):
    settings.RECKON_SMTP_PORT = free_port()
    outcome = _send("s-3")
    assert isinstance(outcome, Failed) and outcome.retryable and outcome.evidence["sent"] is False


def test_a_server_that_never_greets_times_out_before_anything_was_sent(smtp_sandbox, settings):
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts the connection, never answers
        settings.RECKON_SMTP_PORT = silent.getsockname()[1]
        settings.RECKON_PROVIDER_TIMEOUT = 0.3
        outcome = _send("s-4")
    assert isinstance(outcome, Failed) and outcome.retryable and "timed out" in outcome.error


def test_a_temporary_refusal_of_mail_from_is_a_retryable_failure(smtp_sandbox):
    smtp_sandbox.configure_faults(rates={"tempfail_mail": 1.0})
    outcome = _send("s-5")
    assert isinstance(outcome, Failed) and outcome.retryable
    assert (outcome.evidence["stage"], outcome.evidence["code"]) == ("MAIL FROM", 451)


def test_a_refused_recipient_is_a_definitive_failure(smtp_sandbox):
    smtp_sandbox.configure_faults(recipients={"ann@example.com": "reject_rcpt"})
    outcome = _send("s-6")
    assert isinstance(outcome, Failed) and not outcome.retryable and outcome.evidence["code"] == 550
    assert smtp_sandbox.messages() == []


def test_a_connection_dropped_before_data_sent_nothing_and_is_retryable(smtp_sandbox):
    smtp_sandbox.configure_faults(recipients={"ann@example.com": "drop_before_data"})
    outcome = _send("s-7")
    assert isinstance(outcome, Failed) and outcome.retryable and "before DATA" in outcome.error
    assert smtp_sandbox.messages() == []


def test_a_connection_dropped_after_the_message_arrived_is_unknown_whether_archived_or_not(smtp_sandbox):
    smtp_sandbox.configure_faults(markers={f"{ACTION}:s-8": "drop_during_data",
                                           f"{ACTION}:s-9": "drop_after_data"})
    during, after = _send("s-8"), _send("s-9")
    for outcome, job_id in ((during, "s-8"), (after, "s-9")):
        assert isinstance(outcome, Unknown) and "after DATA" in outcome.reason
        assert outcome.evidence == {"sent": True, "message_id": message_id_for(f"{ACTION}:{job_id}")}
    # The worker cannot tell these two apart; only the archive can.
    assert smtp_sandbox.messages(marker=f"{ACTION}:s-8") == []
    assert len(smtp_sandbox.messages(marker=f"{ACTION}:s-9")) == 1


def test_a_server_that_goes_silent_after_data_is_unknown(smtp_sandbox, settings):
    """A hand-written server on a real socket: it takes the whole message, then never replies."""
    listener = socket.create_server(("127.0.0.1", 0))
    received = threading.Event()

    def serve() -> None:
        connection, _ = listener.accept()
        with connection, connection.makefile("rb") as lines:
            connection.sendall(b"220 silent\r\n")
            for line in lines:
                if line.upper().startswith((b"EHLO", b"MAIL", b"RCPT")):
                    connection.sendall(b"250 OK\r\n")
                elif line.upper().startswith(b"DATA"):
                    connection.sendall(b"354 go ahead\r\n")
                elif line == b".\r\n":
                    received.set()  # and no reply: the client times out
                    break
            lines.read()  # until the client gives up and closes

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    settings.RECKON_SMTP_PORT = listener.getsockname()[1]
    settings.RECKON_PROVIDER_TIMEOUT = 0.5
    try:
        outcome = _send("s-10")
    finally:
        server.join(timeout=5)
        listener.close()
    assert received.is_set() and isinstance(outcome, Unknown) and "timed out" in outcome.reason


@pytest.mark.parametrize("payload", [
    {"subject": "Hi", "body": "no recipient"},
    {"to": "not an address", "subject": "Hi", "body": "x"},
    {"to": "a@example.com, b@example.com", "subject": "Hi", "body": "x"},
    {"to": "a@example.com", "subject": "Hi\r\nBcc: everyone@example.com", "body": "x"},
])
def test_a_message_that_cannot_be_sent_as_given_fails_without_touching_the_server(smtp_sandbox, payload):
    outcome = _send("s-11", payload)
    assert isinstance(outcome, Failed) and not outcome.retryable and outcome.evidence == {"sent": False}
    assert smtp_sandbox.messages() == []


def test_a_sender_setting_that_is_not_one_address_fails_every_send_without_touching_the_server(smtp_sandbox,
                                                                                                settings):
    settings.RECKON_SMTP_FROM = "reckon"
    outcome = _send("s-12")
    assert isinstance(outcome, Failed) and not outcome.retryable and "From must be one address" in outcome.error
    assert smtp_sandbox.messages() == []
