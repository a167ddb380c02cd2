"""Classifying what a provider answered: what each answer proves about the side effect.

The one question is whether the effect *may have happened*. Only an answer that proves it did not
(the request never left, or the provider said it did nothing) is a retryable failure; everything
that leaves the question open is `unknown`, which Reckon settles by asking the provider (a
reconciler) before any retry, so a retry never makes a second charge.

    what happened                                                  Verdict     record with
    2xx                                                            SUCCEEDED   lease.succeeded(ref)
    connection refused, DNS failure, TLS handshake failure         RETRYABLE   lease.failed(.., retryable=True)
      (nothing left this process: request_sent=False)
    429 Too Many Requests, 503 Service Unavailable                 RETRYABLE   (the provider did nothing)
    another 4xx (400, 401, 402, 404, 422: the request is wrong)    FAILED      lease.failed(..)
    409 (Stripe-style "a request with this key is in progress",    UNKNOWN     lease.unknown(..)
      which after a dropped connection may be answered forever)
    a dropped connection or a timeout after the request left,      UNKNOWN
      500, 502, 504 and other 5xx, a 2xx whose body cannot be read

`lease.record(verdict, detail)` records any of them; `post_effect` sends a JSON request and records
what its answer proves.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
from collections.abc import Callable
from enum import Enum
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from reckon_client.client import Lease

RETRYABLE_STATUSES = frozenset({429, 503})  # the provider says it did nothing: ask again later


class Verdict(str, Enum):  # noqa: UP042  (StrEnum is 3.11; the client supports 3.10)
    """What an answer proves about the side effect, and so what to record."""

    SUCCEEDED = "succeeded"  # the provider says it happened: record success with its reference
    RETRYABLE = "retryable"  # proves nothing happened: a retryable failure (the next attempt reuses the key)
    FAILED = "failed"  # the provider refused the request for good: a definitive failure
    UNKNOWN = "unknown"  # it may have happened: unknown, settled by a reconciler before any retry


def classify_status(status: int) -> Verdict:
    """The verdict of an HTTP status the provider answered (see the module's table)."""
    if 200 <= status < 300:
        return Verdict.SUCCEEDED
    if status in RETRYABLE_STATUSES:
        return Verdict.RETRYABLE
    if status == 409:  # "in progress" for this idempotency key: an earlier request may have done it
        return Verdict.UNKNOWN
    if 400 <= status < 500:
        return Verdict.FAILED
    return Verdict.UNKNOWN  # 500, 502, 504...: the request reached something that may have acted


def classify_error(error: BaseException, *, request_sent: bool) -> Verdict:
    """The verdict of a call that got no answer. `request_sent`: whether any byte of the request
    may have left (False only when connecting failed: refused, no such host, TLS handshake)."""
    if not request_sent:
        return Verdict.RETRYABLE
    if isinstance(error, (ConnectionRefusedError, socket.gaierror, ssl.SSLCertVerificationError)):
        return Verdict.RETRYABLE  # refused before anything was accepted
    return Verdict.UNKNOWN  # a timeout, a reset, a dropped connection: the provider may have acted


def post_effect(lease: Lease, url: str, body: dict[str, Any], *, result_field: str, provider: str = "the provider",
                timeout: float = 10.0, on_sent: Callable[[], None] | None = None) -> Verdict:
    """POST `body` as JSON to `url`: the lease's side effect, with the job's idempotency key as
    Idempotency-Key and X-Reckon-Marker; then record what the answer proves (the table above) and
    return the verdict. Call it after `lease.begin()`.

    `result_field`: the field of a 2xx answer that names the effect (a 2xx without it is unknown:
    the reconciler finds out which effect it was). `provider` names it in the recorded details.
    `on_sent`: called once the request has left, before its answer is read."""
    parts = urlsplit(url)
    if not parts.hostname:
        raise ValueError(f"post_effect needs an absolute http(s) URL, not {url!r}")
    connection_class = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    connection = connection_class(parts.hostname, parts.port, timeout=timeout)
    key = lease.idempotency_key
    try:
        try:
            connection.connect()
        except OSError as exc:  # nothing left this process: safe to try again
            verdict = classify_error(exc, request_sent=False)
            lease.record(verdict, f"{provider} unreachable: {exc}", evidence={"sent": False})
            return verdict
        try:
            target = parts.path or "/"
            connection.request("POST", target + (f"?{parts.query}" if parts.query else ""), body=json.dumps(body),
                               headers={"Content-Type": "application/json", "Idempotency-Key": key,
                                        "X-Reckon-Marker": key})
            if on_sent is not None:
                on_sent()
            response = connection.getresponse()
            raw = response.read()
        except (OSError, http.client.HTTPException) as exc:  # the request left: it may have been acted on
            verdict = classify_error(exc, request_sent=True)
            lease.record(verdict, f"no answer from {provider} after sending: {type(exc).__name__}: {exc}",
                         evidence={"sent": True})
            return verdict
    finally:
        connection.close()
    try:
        answer = json.loads(raw or b"{}")
    except ValueError:
        answer = {"unreadable": raw[:200].decode(errors="replace")}
    verdict = classify_status(response.status)
    result_ref = str(answer.get(result_field, "")) if isinstance(answer, dict) else ""
    if verdict is Verdict.SUCCEEDED and not result_ref:
        verdict = Verdict.UNKNOWN  # accepted, but we cannot tell which effect: the reconciler finds out
    error = answer.get("error", answer) if isinstance(answer, dict) else answer
    lease.record(verdict, f"{response.status} from {provider}: {error}"[:2000], result_ref=result_ref,
                 evidence={"status": response.status, "body": answer})
    return verdict
