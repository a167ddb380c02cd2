"""A typed client for Reckon's worker API (standard library only).

    from reckon_client import Client

    client = Client("https://reckon.example.com", token="rk_...")

    # Run one side effect under the ledger: enqueue-or-get, claim, begin, record. Called again for
    # the same job (an agent restarted), it raises AlreadySucceeded (with the recorded result) or
    # HeldUnknown instead of running the block twice.
    with client.effect("mail.send", "mail-42", {...}, tenant="acme", worker="mailer-7") as lease:
        lease.result_ref = send(lease.payload, key=lease.idempotency_key)

    # Or pull work: the oldest claimable job in the token's scope, waiting up to 30 s for one.
    lease = client.next_lease("mailer-7", actions=["mail.send"], wait_seconds=30)
    if lease is not None:
        with lease:                         # renewed in the background while the block runs
            lease.begin()                   # only now may you touch the outside world
            lease.succeeded(send(lease.payload, key=lease.idempotency_key))
    else:
        print(client.nothing_claimed)       # why nothing came (e.g. the dead-man gate holds the work)

    # Or answer Reckon's look-ups of unknown attempts (pull-mode reconciliation): reconciliations.py.

A webhook reconciler checks that a question comes from Reckon with `verify_webhook` and signs its
answer with `sign_answer` (webhooks.py).
What a provider's answer proves (retry, fail, or unknown) is `classify_status`/`classify_error`
(providers.py); `lease.record(verdict, detail)` records it.

An exception inside a block records what can honestly be said: `unknown` once the side effect
has begun (the call may have happened), a retryable failure before that. An answer that is not
Reckon's API (a redirect, HTML) raises UnexpectedAnswer: nothing succeeds by accident.
"""

from reckon_client.client import BatchReport, Client, Deferred, Lease, NothingClaimed, Outcome
from reckon_client.errors import AlreadySucceeded, HeldUnknown, ReckonError, UnexpectedAnswer
from reckon_client.providers import Verdict, classify_error, classify_status, post_effect
from reckon_client.reconciliations import Finding, Reconciliation
from reckon_client.transport import ReckonUnavailable
from reckon_client.webhooks import (
    WEBHOOK_SIGNATURE_HEADER,
    QuestionLog,
    WebhookSignatureError,
    sign_answer,
    sign_webhook,
    verify_answer,
    verify_webhook,
)

__all__ = [
    "WEBHOOK_SIGNATURE_HEADER",
    "AlreadySucceeded",
    "BatchReport",
    "Client",
    "Deferred",
    "Finding",
    "HeldUnknown",
    "Lease",
    "NothingClaimed",
    "Outcome",
    "QuestionLog",
    "Reconciliation",
    "ReckonError",
    "ReckonUnavailable",
    "UnexpectedAnswer",
    "Verdict",
    "WebhookSignatureError",
    "classify_error",
    "classify_status",
    "post_effect",
    "sign_answer",
    "sign_webhook",
    "verify_answer",
    "verify_webhook",
]
