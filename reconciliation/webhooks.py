"""Webhook reconcilers: Reckon asks a team's own endpoint what happened to an unknown attempt.

The request is a signed JSON POST:

    {question_id, job_id, tenant, action, idempotency_key, marker, payload, attempt, evidence_so_far}

with the header `Reckon-Signature: t=<unix seconds>,v1=<hex>[,v1=<hex>]`, where each v1 is
HMAC-SHA256(secret, "<t>." + the exact body) for one of the action's secrets (two during a
rotation). `question_id` is new for every request: a receiver checks the signature with the Python
client's `verify_webhook`, which refuses a question signed more than a minute from now and, given
the ids it has taken, a question asked before (examples/webhook_receiver.py is a complete receiver).

The answer must be a JSON object `{outcome: confirmed|not_found|conflict, evidence, reason,
result_ref, asked}`, signed for the question: its own `Reckon-Signature: v1=<hex>` header,
HMAC-SHA256(secret, "answer.<question_id>." + the exact answer body) (the client's `sign_answer`).
`asked` (optional) names the provider the receiver looked at, in the terms of the attempt's
`sent_to` (where the worker sent the effect): when they differ, the answer decides nothing alone
(reconciliation.findings.where_it_was_sent). Anything else — a timeout, a 5xx, an answer not signed
for this question, invalid JSON, an unknown outcome, evidence holding `mcp_result` (the MCP
gateway's record of a tool's result, which only the gateway writes), and (as for every reconciler)
`not_found` without a reason — proves nothing: `unavailable`, with the usual back-off. The check row records
the request and the answer.
"""

from __future__ import annotations

import http.client
import json
import os
import secrets
from urllib.parse import urlsplit

from reckon_client import WEBHOOK_SIGNATURE_HEADER, WebhookSignatureError, sign_webhook, verify_answer

from ledger.actions import GATEWAY_RESULT, Webhook
from ledger.budget import BUDGET, NotSent, parse_retry_after
from ledger.models import Attempt, Job
from reconciliation.findings import REPORTED, Finding
from reconciliation.models import CheckOutcome

ANSWERS = (CheckOutcome.CONFIRMED, CheckOutcome.NOT_FOUND, CheckOutcome.CONFLICT)
# How much of an answer that is not JSON the check keeps.
RAW_ANSWER_LIMIT = 2000


def request_body(job: Job, attempt: Attempt, *, question_id: str) -> dict:
    """What the receiver is told: the job, the attempt in question, and what we know so far."""
    return {
        "question_id": question_id,
        "job_id": job.job_id,
        "tenant": job.tenant,
        "action": job.action,
        "idempotency_key": job.idempotency_key,
        "marker": job.idempotency_key,
        "payload": job.payload,
        "attempt": {"number": attempt.number, **attempt.states, "error": attempt.error,
                    "result_ref": attempt.result_ref, "sent_to": attempt.sent_to},
        "evidence_so_far": {"provider_answers": getattr(attempt, REPORTED, None) or []},
    }


def ask(webhook: Webhook, job: Job, attempt: Attempt) -> Finding:
    """POST the signed question and read the answer (no database: this runs in a lookup thread)."""
    question_id = f"q_{secrets.token_hex(16)}"  # new for every request: the answer is bound to it
    question = request_body(job, attempt, question_id=question_id)
    body = json.dumps(question, separators=(",", ":"), sort_keys=True).encode()
    keys = [key for key in (os.environ.get(name, "") for name in webhook.secret_variables) if key]
    record = {"url": webhook.url, "request": question}
    try:
        status, raw, signature, retry_after = _post(webhook, body, sign_webhook(body, keys))
    except NotSent as exc:  # its budget refused the call here: the receiver was not asked
        return _unavailable(f"webhook {webhook.url} not asked: {exc}", record, getattr(exc, "retry_in", None))
    except OSError as exc:
        return _unavailable(f"webhook {webhook.url} did not answer: {type(exc).__name__}: {exc}", record)
    except http.client.HTTPException as exc:
        return _unavailable(f"webhook {webhook.url} answered badly: {type(exc).__name__}: {exc}", record)
    record["status"] = status
    if 200 <= status < 300:
        try:
            verify_answer(raw, signature, question_id, keys)
        except WebhookSignatureError as exc:
            record["answer_text"] = raw[:RAW_ANSWER_LIMIT].decode(errors="replace")
            return _unavailable(f"webhook answered {status}, not signed for question {question_id}: {exc}; "
                                f"the receiver signs its answer with reckon_client.sign_answer", record)
    try:
        answer = json.loads(raw)
    except ValueError:
        record["answer_text"] = raw[:RAW_ANSWER_LIMIT].decode(errors="replace")
        return _unavailable(f"webhook answered {status} with a body that is not JSON", record)
    record["answer"] = answer
    if status == 429:  # rate limited: not asked, so not counted
        return _unavailable(f"webhook answered {status}", record, retry_after if retry_after is not None else 1.0)
    if not 200 <= status < 300:
        return _unavailable(f"webhook answered {status}", record)
    if not isinstance(answer, dict) or answer.get("outcome") not in ANSWERS:
        outcome = answer.get("outcome") if isinstance(answer, dict) else answer
        return _unavailable(f"webhook answered an unknown outcome {outcome!r:.80} "
                            f"(expected one of {', '.join(ANSWERS)})", record)
    reason, evidence, result_ref = answer.get("reason", ""), answer.get("evidence", {}), answer.get("result_ref", "")
    asked = answer.get("asked", "")
    if not all(isinstance(text, str) for text in (reason, result_ref, asked)) or not isinstance(evidence, dict):
        return _unavailable("webhook answer: reason, result_ref and asked must be strings, evidence an object", record)
    if GATEWAY_RESULT in evidence:  # the gateway would answer its agent's next call from it
        return _unavailable(f"webhook answer refused: its evidence holds {GATEWAY_RESULT!r}, where the MCP gateway "
                            "records a tool's result; only the gateway and its reconciler write it", record)
    return Finding(answer["outcome"], reason, {**evidence, "webhook": record}, result_ref=result_ref, asked=asked)


def _unavailable(reason: str, record: dict, retry_in: float | None = None) -> Finding:
    return Finding(CheckOutcome.UNAVAILABLE, reason, {"webhook": record}, retry_in=retry_in)


def _post(webhook: Webhook, body: bytes, signature: str) -> tuple[int, bytes, str, float | None]:
    """The answer's status, body, signature and Retry-After, within the endpoint's budget
    (ledger.budget)."""
    parts = urlsplit(webhook.url)
    slot = BUDGET.slot(f"webhook {parts.netloc}")
    connection_class = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    connection = connection_class(parts.hostname, parts.port, timeout=webhook.timeout)
    try:
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        connection.request("POST", path, body=body, headers={
            "Content-Type": "application/json", WEBHOOK_SIGNATURE_HEADER: signature, "User-Agent": "reckon-reconciler",
        })
        response = connection.getresponse()
        raw = response.read(1024 * 1024)
    except (OSError, http.client.HTTPException) as exc:
        slot.no_answer(f"{type(exc).__name__}: {exc}")
        raise
    finally:
        connection.close()
    retry_after = parse_retry_after(response.getheader("Retry-After"))
    slot.answered(response.status, retry_after)
    return response.status, raw, response.getheader(WEBHOOK_SIGNATURE_HEADER) or "", retry_after
