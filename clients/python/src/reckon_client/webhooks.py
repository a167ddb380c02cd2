"""Webhook reconcilers: checking that a question comes from Reckon, and signing the answer.

Reckon asks with a signed JSON POST; the receiver checks it on the exact bytes of the body:

    question = verify_webhook(body, request.headers["Reckon-Signature"], [secret], seen=SEEN)

which returns the question (a dict) or raises WebhookSignatureError, whatever the header holds:
answer 401 and do nothing. A question signed more than a minute from now, one no secret signs,
or (with `seen`) one whose `question_id` was already asked is refused. The receiver then signs
its answer's exact bytes for that question and sends the value in its own `Reckon-Signature`
header:

    headers["Reckon-Signature"] = sign_answer(answer_body, question["question_id"], [secret])

Reckon takes no answer that is not signed for the question it asked (it counts as "unavailable").
Reckon itself signs with `sign_webhook` and checks answers with `verify_answer`: one
implementation of the scheme for both sides.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import threading
import time
from collections.abc import Iterable
from typing import Any, Protocol

WEBHOOK_SIGNATURE_HEADER = "Reckon-Signature"
# A question older (or further in the future) than this is refused: a captured one replays at most
# this long, and a receiver's `seen` log need remember ids only this long.
WEBHOOK_TOLERANCE_S = 60
# Longer headers are refused unread: a header has one `t` and at most a few signatures.
MAX_HEADER_LENGTH = 1024

_STAMP = re.compile(r"[0-9]{1,12}")  # ASCII digits only: str.isdigit() takes "²" and "١"
_SIGNATURE = re.compile(r"[0-9a-f]{64}")  # one hex HMAC-SHA256


class WebhookSignatureError(ValueError):
    """A question or answer whose signature does not hold, for whatever reason (absent, malformed,
    stale, replayed, signed by an unknown secret): the one exception `verify_webhook` and
    `verify_answer` raise for bad input. A receiver answers 401 and does nothing."""


class SeenQuestions(Protocol):
    """Where a receiver remembers the question ids it has taken, until they expire (`seen=`)."""

    def first_time(self, question_id: str, expires_at: float) -> bool:
        """Remember `question_id` until `expires_at` (unix seconds); False if it was already there."""
        ...


class QuestionLog:
    """`SeenQuestions` in this process's memory. A receiver served by several processes or hosts
    keeps the ids in a store they share instead (e.g. Redis `SET id 1 NX EXAT expires_at`, or a
    table with a unique id column), or a question replayed to another process is taken again."""

    def __init__(self) -> None:
        self._expiry: dict[str, float] = {}
        self._lock = threading.Lock()

    def first_time(self, question_id: str, expires_at: float) -> bool:
        now = time.time()
        with self._lock:
            self._expiry = {qid: at for qid, at in self._expiry.items() if at >= now}
            if question_id in self._expiry:
                return False
            self._expiry[question_id] = expires_at
            return True


def sign_webhook(body: bytes, secrets: Iterable[str], *, at: int | None = None) -> str:
    """The `Reckon-Signature` value for a question: t=<unix time>, then one v1=<hex> per secret
    (HMAC-SHA256 over "<t>." + the exact body). Reckon signs with every configured secret, so a
    rotation can set the new and the old one and receivers verify with either."""
    at = int(time.time()) if at is None else at
    signed = f"{at}.".encode() + body
    return ",".join([f"t={at}"] + [f"v1={_mac(s, signed)}" for s in secrets])


def verify_webhook(body: bytes, header: object, secrets: Iterable[str], *, tolerance: int = WEBHOOK_TOLERANCE_S,
                   now: float | None = None, seen: SeenQuestions | None = None) -> dict[str, Any]:
    """The question `body` holds, once `header` signs its exact bytes with one of `secrets` (two
    during a rotation) at most `tolerance` seconds from now. With `seen`, a question whose id was
    taken before is a replay. Raises WebhookSignatureError for anything else, never another error."""
    at, signatures = _parse(header, stamped=True)
    if not isinstance(body, bytes | bytearray | memoryview):
        raise WebhookSignatureError("the body must be the request's raw bytes")
    now = time.time() if now is None else now
    if abs(now - at) > tolerance:
        raise WebhookSignatureError(f"signed at t={at}, {abs(now - at):.0f} s from this clock: more than {tolerance} s "
                                    f"(a replay, or a clock to set right)")
    if not _matches(f"{at}.".encode() + bytes(body), signatures, secrets):
        raise WebhookSignatureError("no signature matches a known secret")
    try:
        question = json.loads(bytes(body))
    except ValueError:
        question = None
    if not isinstance(question, dict):
        raise WebhookSignatureError("the signed body is not a JSON object")
    if seen is not None:
        question_id = question.get("question_id")
        if not isinstance(question_id, str) or not question_id:
            raise WebhookSignatureError("the question has no question_id to check for a replay")
        if not seen.first_time(question_id, at + tolerance):
            raise WebhookSignatureError(f"question {question_id} was already asked: a replay")
    return question


def sign_answer(body: bytes, question_id: str, secrets: Iterable[str]) -> str:
    """The `Reckon-Signature` value for an answer to question `question_id`: one v1=<hex> per
    secret, HMAC-SHA256 over "answer.<question_id>." + the exact answer body. Bound to the
    question, so an answer captured once never answers another question."""
    signed = _answer_message(body, question_id)
    return ",".join(f"v1={_mac(s, signed)}" for s in secrets)


def verify_answer(body: bytes, header: object, question_id: str, secrets: Iterable[str]) -> None:
    """Raise WebhookSignatureError unless `header` signs the exact answer `body` to `question_id`
    with one of `secrets` (what Reckon checks before it takes an answer)."""
    _, signatures = _parse(header, stamped=False)
    if not _matches(_answer_message(bytes(body), question_id), signatures, secrets):
        raise WebhookSignatureError("no signature matches a known secret for this question")


def _parse(header: object, *, stamped: bool) -> tuple[int, list[bytes]]:
    """The header's `t` (0 when not `stamped`) and its v1 signatures; malformed: WebhookSignatureError."""
    if not isinstance(header, str) or not header:
        raise WebhookSignatureError(f"no {WEBHOOK_SIGNATURE_HEADER} header")
    if len(header) > MAX_HEADER_LENGTH:
        raise WebhookSignatureError(f"malformed {WEBHOOK_SIGNATURE_HEADER} header: longer than {MAX_HEADER_LENGTH}")
    parts = [part.strip().partition("=") for part in header.split(",")]
    stamps = [value for key, _, value in parts if key == "t"]
    signatures = [value for key, _, value in parts if key == "v1"]
    if stamped and (len(stamps) != 1 or not _STAMP.fullmatch(stamps[0])):
        raise WebhookSignatureError(f"malformed {WEBHOOK_SIGNATURE_HEADER} header: one t=<unix seconds> expected")
    if not signatures or not all(_SIGNATURE.fullmatch(s) for s in signatures):
        raise WebhookSignatureError(f"malformed {WEBHOOK_SIGNATURE_HEADER} header: v1=<64 hex digits> expected")
    return (int(stamps[0]) if stamped else 0), [s.encode("ascii") for s in signatures]


def _matches(message: bytes, signatures: list[bytes], secrets: Iterable[str]) -> bool:
    expected = [_mac(s, message).encode("ascii") for s in secrets if s]
    return any(hmac.compare_digest(e, given) for e in expected for given in signatures)


def _mac(secret: str, message: bytes) -> str:
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def _answer_message(body: bytes, question_id: str) -> bytes:
    return f"answer.{question_id}.".encode() + body
