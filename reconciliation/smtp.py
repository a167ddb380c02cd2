"""The reconciler of mail sent over SMTP: find the message by its Message-ID in the archive.

SMTP cannot be asked what a server accepted, so the lookup goes to the archive of accepted
mail (`RECKON_SMTP_LOOKUP_URL`: a provider's message API, a journaling mailbox; in the demo and
the tests, the SMTP sandbox's `GET /messages?message_id=`). The archive holds a message before
the server answers 250 to it, so when the archive answers and has no message with the job's
Message-ID, the send never completed DATA and a resend cannot deliver it twice.
"""

from __future__ import annotations

from dataclasses import replace
from email.utils import parseaddr
from urllib.parse import urlencode

from django.conf import settings

from ledger.models import Attempt, Job
from ledger.providers import NoAnswer, NotSent, call
from ledger.smtp import endpoint, message_id_for
from reconciliation.findings import Finding, not_asked, sent_elsewhere
from reconciliation.models import CheckOutcome

SUMMARY = ("seq", "message_id", "marker", "from", "to", "subject", "received_at")


def sent_message(job: Job, attempt: Attempt) -> Finding:
    """Asks the archive of the SMTP server this process is configured with (RECKON_SMTP_HOST and
    RECKON_SMTP_PORT: the archive at RECKON_SMTP_LOOKUP_URL must be that server's); a message the
    attempt sent through another server is not there to find."""
    server = endpoint(settings.RECKON_SMTP_HOST, settings.RECKON_SMTP_PORT)
    return sent_elsewhere(attempt, server) or replace(_in_archive(job), asked=server)


def _in_archive(job: Job) -> Finding:
    message_id = message_id_for(job.idempotency_key)
    url = f"{settings.RECKON_SMTP_LOOKUP_URL}/messages?{urlencode({'message_id': message_id})}"
    evidence = {"message_id": message_id, "marker": job.idempotency_key, "url": url}
    try:
        reply = call("GET", url, provider="smtp-archive")
    except (NotSent, NoAnswer) as exc:
        return Finding(CheckOutcome.UNAVAILABLE, f"the mail archive gave no answer: {exc}", evidence,
                       retry_in=not_asked(exc))
    messages = reply.body.get("messages")
    if not reply.ok or not isinstance(messages, list):
        return Finding(CheckOutcome.UNAVAILABLE, f"the mail archive gave no definite answer: {reply.status} "
                       f"{reply.error}", {**evidence, "status": reply.status},
                       retry_in=not_asked(None, reply.status, reply.retry_after))
    # What was found, without the text: enough for a person to judge, small enough to keep.
    evidence["found"] = [{name: message.get(name) for name in SUMMARY} for message in messages]
    if not messages:
        return Finding(CheckOutcome.NOT_FOUND, f"no message with Message-ID {message_id} in the archive; the server "
                       "archives every message before it answers 250, so the send never completed DATA", evidence)
    if len(messages) > 1:
        return Finding(CheckOutcome.CONFLICT, f"{len(messages)} messages with Message-ID {message_id} are in the "
                       "archive: this mail was delivered more than once", evidence)
    [message] = messages
    p = job.payload
    # The archive lists the envelope's recipients (addresses without display names), and a header
    # keeps no surrounding blanks. Anything else that differs is a conflict: a person looks.
    expected = {"to": [parseaddr(str(p.get("to", "")))[1]], "subject": str(p.get("subject", "")).strip(),
                "marker": job.idempotency_key}
    archived = {**message, "subject": str(message.get("subject") or "").strip()}
    differences = {name: {"expected": want, "archive": archived.get(name)}
                   for name, want in expected.items() if archived.get(name) != want}
    if differences:
        return Finding(CheckOutcome.CONFLICT, f"message {message_id} is in the archive but differs from the job: "
                       + ", ".join(sorted(differences)), {**evidence, "differences": differences})
    return Finding(CheckOutcome.CONFIRMED, f"message {message_id} is in the archive (received "
                   f"{message.get('received_at')})", evidence, result_ref=message_id)
