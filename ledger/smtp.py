"""Sending one message over SMTP and saying honestly what we know afterwards.

SMTP draws the line for us. A server takes responsibility for a message only by answering
``250`` to the end of its DATA, and no message exists before its content was sent. So:

- nothing of the message left this process (connection refused, a refusal or a dropped
  connection at MAIL FROM or RCPT TO, the DATA command refused): `NotSent` or `Rejected`;
- a definite reply to the end of DATA that is not ``250`` (4xx: try later; 5xx: never) is
  `Rejected`: the server says it did not take the message (RFC 5321 §4.2.1);
- once the DATA command is on the wire, a timeout or a dropped connection without that reply
  is `NoAnswer`: the server may have accepted the message.

The message carries its job's marker twice: in its Message-ID, which is a function of the
marker alone (`message_id_for`), and in the ``X-Reckon-Marker`` header, so a reconciler finds
it by either and a resend carries the same Message-ID.
"""

from __future__ import annotations

import hashlib
import smtplib
from dataclasses import dataclass
from email import policy
from email.message import EmailMessage

from ledger.budget import BUDGET
from ledger.providers import NoAnswer, NotSent

MARKER_HEADER = "X-Reckon-Marker"
# Every header folded and encoded for the wire; a non-ASCII body goes quoted-printable, so the
# message is 7-bit clean and needs no 8BITMIME from the server.
WIRE = policy.SMTP.clone(cte_type="7bit")


def endpoint(host: str, port: int) -> str:
    """The SMTP server as an attempt records where its message was sent (ledger.endpoints)."""
    return f"smtp://[{host}]:{port}" if ":" in host else f"smtp://{host}:{port}"


def message_id_for(marker: str) -> str:
    """The Message-ID of the message a job sends: the same for every attempt of the job."""
    return f"<{hashlib.sha256(marker.encode()).hexdigest()[:32]}@reckon>"


def compose(*, sender: str, to: str, subject: str, body: str, marker: str) -> EmailMessage:
    """The message for one job (raises ValueError for a header that cannot be sent as given)."""
    message = EmailMessage(policy=WIRE)
    message["From"] = sender
    message["To"] = to
    message["Subject"] = subject
    message["Message-ID"] = message_id_for(marker)
    message[MARKER_HEADER] = marker
    message.set_content(body)
    for header, given in (("From", sender), ("To", to)):
        addresses = message[header].addresses
        if len(addresses) != 1 or "@" not in addresses[0].addr_spec:
            raise ValueError(f"{header} must be one address, got {given!r}")
    return message


class Rejected(Exception):
    """The server answered with a refusal: it did not take the message."""

    def __init__(self, stage: str, code: int, reply: bytes | str):
        self.stage, self.code = stage, code
        self.reply = reply.decode(errors="replace") if isinstance(reply, bytes) else reply
        super().__init__(f"{stage}: {code} {self.reply}")

    @property
    def temporary(self) -> bool:
        """4xx: the server asks us to try again later; 5xx: it never will take this message."""
        return 400 <= self.code < 500


@dataclass(frozen=True)
class Accepted:
    code: int
    reply: str


def send(message: EmailMessage, *, host: str, port: int, timeout: float) -> Accepted:
    """One SMTP transaction for `message` within the server's budget (ledger.budget, provider
    "smtp"): `Accepted`, or NotSent (OverBudget, CircuitOpen among them) / Rejected / NoAnswer."""
    slot = BUDGET.slot("smtp")
    try:
        accepted = _send(message, host=host, port=port, timeout=timeout)
    except (NotSent, NoAnswer) as exc:  # down or silent: towards opening its circuit
        slot.no_answer(str(exc))
        raise
    except Rejected:
        slot.answered(250)  # a refusal is an answer: the server is up
        raise
    slot.answered(accepted.code)
    return accepted


def _send(message: EmailMessage, *, host: str, port: int, timeout: float) -> Accepted:
    where = f"{host}:{port}"
    sender = message["From"].addresses[0].addr_spec
    recipients = [address.addr_spec for address in message["To"].addresses]
    try:
        client = smtplib.SMTP(host, port, timeout=timeout)
    except (OSError, smtplib.SMTPException) as exc:
        raise NotSent(f"could not open an SMTP session with {where}: {type(exc).__name__}: {exc}") from exc
    try:
        try:
            client.ehlo_or_helo_if_needed()
            code, reply = client.mail(sender)
            if code != 250:
                raise Rejected("MAIL FROM", code, reply)
            for recipient in recipients:
                code, reply = client.rcpt(recipient)
                if code not in (250, 251):
                    raise Rejected(f"RCPT TO <{recipient}>", code, reply)
        except (OSError, smtplib.SMTPException) as exc:
            raise NotSent(f"{where} before DATA: {type(exc).__name__}: {exc or 'connection closed'}") from exc
        try:
            code, reply = client.data(message.as_bytes(policy=WIRE))
        except smtplib.SMTPDataError as exc:  # DATA itself refused: the content was never sent
            raise Rejected("DATA", exc.smtp_code, exc.smtp_error) from exc
        except (OSError, smtplib.SMTPException) as exc:
            raise NoAnswer(f"{where} after DATA: {type(exc).__name__}: {exc or 'connection closed'}") from exc
        if code != 250:
            raise Rejected("end of DATA", code, reply)
        try:
            client.quit()
        except (OSError, smtplib.SMTPException):
            pass  # the message was accepted; how the session ends changes nothing
        return Accepted(code, reply.decode(errors="replace"))
    finally:
        client.close()
