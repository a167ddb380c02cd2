"""The SMTP sandbox as a client sees it: real SMTP over a socket, faults at each step, the archive."""

import smtplib
import subprocess
import sys
from email import policy
from email.message import EmailMessage

import pytest

from sandbox.smtp.faults import KINDS
from sandbox.smtp.testing import SmtpSandboxProcess
from sandbox.testing import CHECKOUT, free_port

WIRE = policy.SMTP
NO_FAULTS = dict.fromkeys(KINDS, 0.0)  # the configuration shows every kind's rate


def _message(marker: str, to: str = "ann@example.com", body: str = "Your order shipped.\n") -> bytes:
    message = EmailMessage(policy=WIRE)
    message["From"] = "shop@example.com"
    message["To"] = to
    message["Subject"] = "Shipped"
    message["Message-ID"] = f"<{marker}@test>"
    message["X-Reckon-Marker"] = marker
    message.set_content(body)
    return message.as_bytes()


def _client(smtp) -> smtplib.SMTP:
    client = smtplib.SMTP(smtp.host, smtp.smtp_port, timeout=5)
    client.ehlo()
    return client


def _send(smtp, marker: str, to: str = "ann@example.com", body: str = "Your order shipped.\n"):
    """MAIL, RCPT, DATA: the reply to each step, or the exception that ended the transaction."""
    client = _client(smtp)
    replies = []
    try:
        replies.append(client.mail("shop@example.com")[0])
        replies.append(client.rcpt(to)[0])
        if replies[-1] == 250:
            replies.append(client.data(_message(marker, to, body))[0])
    except smtplib.SMTPServerDisconnected:
        replies.append("disconnected")
    finally:
        client.close()
    return replies


def test_an_accepted_message_is_archived_with_its_message_id_and_headers(smtp_sandbox):
    assert _send(smtp_sandbox, "m-1", body="Line one\n.starts with a dot\n") == [250, 250, 250]
    [message] = smtp_sandbox.messages(message_id="<m-1@test>")
    assert message["marker"] == "m-1" and message["to"] == ["ann@example.com"]
    assert message["from"] == "shop@example.com" and message["subject"] == "Shipped"
    assert ["X-Reckon-Marker", "m-1"] in message["headers"]
    assert message["body"] == "Line one\n.starts with a dot\n"  # dot-stuffing undone, line ends decoded
    assert smtp_sandbox.messages(marker="m-1") == [message]
    assert smtp_sandbox.messages(message_id="<other@test>") == []


def test_a_message_sent_twice_is_two_archived_messages(smtp_sandbox):
    _send(smtp_sandbox, "m-2")
    _send(smtp_sandbox, "m-2")
    assert len(smtp_sandbox.messages(message_id="<m-2@test>")) == 2


def test_drop_after_data_archives_the_message_and_never_answers(smtp_sandbox):
    smtp_sandbox.configure_faults(markers={"m-3": "drop_after_data"})
    assert _send(smtp_sandbox, "m-3") == [250, 250, "disconnected"]
    assert len(smtp_sandbox.messages(message_id="<m-3@test>")) == 1
    assert _send(smtp_sandbox, "m-4") == [250, 250, 250]  # the rule is for that marker only


def test_drop_during_data_receives_everything_and_archives_nothing(smtp_sandbox):
    smtp_sandbox.configure_faults(markers={"m-5": "drop_during_data"})
    assert _send(smtp_sandbox, "m-5") == [250, 250, "disconnected"]
    assert smtp_sandbox.messages(message_id="<m-5@test>") == []


def test_envelope_faults_are_chosen_by_recipient(smtp_sandbox):
    smtp_sandbox.configure_faults(recipients={"Gone@Example.com": "reject_rcpt", "cut@example.com": "drop_before_data"})
    assert _send(smtp_sandbox, "m-6", to="gone@example.com") == [250, 550]
    assert _send(smtp_sandbox, "m-7", to="cut@example.com") == [250, "disconnected"]
    assert smtp_sandbox.messages() == []


def test_rates_from_the_command_line_apply_to_every_transaction_drawn():
    with SmtpSandboxProcess(rates={"tempfail_mail": 1.0}) as smtp:
        client = _client(smtp)
        try:
            assert client.mail("shop@example.com")[0] == 451
        finally:
            client.close()
        assert smtp.request("GET", "/_admin/faults").json["rates"] == {**NO_FAULTS, "tempfail_mail": 1.0}
        smtp.configure_faults()
        assert _send(smtp, "m-8") == [250, 250, 250]
        smtp.reset()  # back to the faults it started with, archive empty
        assert smtp.request("GET", "/_admin/faults").json["rates"] == {**NO_FAULTS, "tempfail_mail": 1.0}
        assert smtp.messages() == []


def test_a_seeded_rate_drops_the_same_transactions_each_run():
    def run() -> list:
        with SmtpSandboxProcess(rates={"drop_after_data": 0.5}, seed=11) as smtp:
            outcomes = [_send(smtp, f"s-{n}")[-1] for n in range(8)]
            assert len(smtp.messages()) == 8  # dropped or not, every message was archived
            return outcomes

    first = run()
    assert first == run() and {250, "disconnected"} <= set(first)


def test_the_archive_survives_a_restart(smtp_sandbox):
    _send(smtp_sandbox, "m-9")
    smtp_sandbox.restart()
    assert len(smtp_sandbox.messages(marker="m-9")) == 1


@pytest.mark.parametrize(("body", "message"), [
    ({"rates": {"drop_after_data": 1.5}}, "between 0 and 1"),
    ({"rates": {"explode": 0.1}}, "unknown fault kind"),
    ({"rates": {"drop_after_data": 0.6, "drop_during_data": 0.6}}, "at most 1"),
    ({"markers": {"m": "reject_rcpt"}}, "only faults that act once it has arrived"),
    ({"recipients": {"a@example.com": "nonsense"}}, "not a fault kind"),
    ({"recipients": {" ": "reject_rcpt"}}, "non-empty key"),
    ({"seed": "seven"}, "seed must be an integer"),
    ({"delay": 1}, "unknown field"),
    ([], "must be a JSON object"),
])
def test_a_bad_fault_configuration_is_refused_and_changes_nothing(smtp_sandbox, body, message):
    smtp_sandbox.configure_faults(markers={"keep": "drop_after_data"})
    response = smtp_sandbox.request("PUT", "/_admin/faults", body)
    assert response.status == 400 and message in response.json["error"]
    assert smtp_sandbox.request("GET", "/_admin/faults").json["markers"] == {"keep": "drop_after_data"}


def test_the_lookup_api_is_read_only_and_says_what_is_wrong(smtp_sandbox):
    assert smtp_sandbox.request("GET", "/messages?sender=x").status == 400
    assert smtp_sandbox.request("GET", "/messages?message_id=").status == 400
    assert smtp_sandbox.request("GET", "/messages?marker=a&marker=b").status == 400
    refused = smtp_sandbox.request("POST", "/messages", {"message_id": "<x@test>"})
    assert refused.status == 405 and "allowed: GET" in refused.json["error"]
    assert smtp_sandbox.request("GET", "/nothing").status == 404


def test_a_port_in_use_stops_the_command_with_a_message():
    with SmtpSandboxProcess() as smtp:
        result = subprocess.run(
            [sys.executable, "manage.py", "smtp_sandbox", "--port", str(smtp.smtp_port),
             "--http-port", str(free_port()), "--db", str(smtp.db_path)],
            cwd=CHECKOUT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and "cannot listen" in result.stderr
