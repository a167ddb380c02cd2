"""Webhook reconcilers: checking that a request comes from Reckon (and signing one, as Reckon does).

A receiver calls `verify_webhook(body, request.headers["Reckon-Signature"], [secret])` on the
exact bytes of the request body before it trusts anything in it; a request signed more than five
minutes ago, or with no signature matching a secret it knows, raises WebhookSignatureError.
Reckon itself signs with `sign_webhook`: one implementation of the scheme for both sides.
"""

from __future__ import annotations

import hashlib
import hmac
import time

WEBHOOK_SIGNATURE_HEADER = "Reckon-Signature"
WEBHOOK_TOLERANCE_S = 300


class WebhookSignatureError(ValueError):
    """A webhook request whose signature does not hold: answer 401 and do nothing."""


def sign_webhook(body: bytes, secrets: list[str], *, at: int | None = None) -> str:
    """The `Reckon-Signature` value for `body`: t=<unix time>, then one v1=<hex> per secret
    (HMAC-SHA256 over "<t>." + the exact body). Reckon signs with every configured secret, so a
    rotation can set the new and the old one and receivers verify with either."""
    at = int(time.time()) if at is None else at
    signed = f"{at}.".encode() + body
    return ",".join([f"t={at}"] + [f"v1={hmac.new(s.encode(), signed, hashlib.sha256).hexdigest()}" for s in secrets])


def verify_webhook(body: bytes, header: str, secrets: list[str], *, tolerance: int = WEBHOOK_TOLERANCE_S,
                   now: float | None = None) -> None:
    """Raise WebhookSignatureError unless `header` signs the exact `body` with one of `secrets`
    (two during a rotation), at most `tolerance` seconds from now (an older request is a replay)."""
    parts = [part.strip().partition("=") for part in (header or "").split(",")]
    stamps = [value for key, _, value in parts if key == "t"]
    signatures = [value for key, _, value in parts if key == "v1"]
    if len(stamps) != 1 or not stamps[0].isdigit() or not signatures:
        raise WebhookSignatureError(f"malformed {WEBHOOK_SIGNATURE_HEADER} header")
    at = int(stamps[0])
    now = time.time() if now is None else now
    if abs(now - at) > tolerance:
        raise WebhookSignatureError(f"signed {now - at:.0f} s ago: older than {tolerance} s (a replay?)")
    signed = f"{at}.".encode() + body
    expected = [hmac.new(s.encode(), signed, hashlib.sha256).hexdigest() for s in secrets if s]
    if not any(hmac.compare_digest(e, given) for e in expected for given in signatures):
        raise WebhookSignatureError("no signature matches a known secret")
