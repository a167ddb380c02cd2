"""`Idempotency-Key` on the enqueue, with Stripe's semantics (and the Agentic Commerce Protocol's
status codes), scoped to the token that sends it:

    a new key                         the enqueue runs; the key remembers the request and its job (201, or
                                      200 when the job id was already enqueued with the same work)
    the same key, the same request    the same job, as enqueueing it again answers (200, Idempotent-Replayed)
    the same key, another request     422 idempotency_key_reused: nothing is enqueued
    the same key, while the first     409 idempotency_key_in_flight (Retry-After): the first request's
    request with it is not committed  transaction holds the key; its answer is not known yet

The key is written in the enqueue's own transaction, beside the job and its ledger event: a key
whose enqueue was refused or rolled back is no key, and a later request with it runs afresh.
Without the header the enqueue is what it always was: idempotent on `job_id`.
"""

from __future__ import annotations

import hashlib
import json

from django.db import connection, transaction

from api.models import EnqueueKey, WorkerToken
from ledger import services
from ledger.models import Job

HEADER = "Idempotency-Key"
MAX_LENGTH = 255
IN_FLIGHT_RETRY_AFTER_S = 1
# The advisory lock class of enqueue keys (pg_try_advisory_xact_lock(class, key)); other locks of the
# project take the one-argument form.
LOCK_CLASS = 0x52434B31  # "RCK1"


class KeyInFlight(Exception):
    """Another request with the key is being enqueued now: its answer is not known yet."""


class KeyReused(Exception):
    """The key was sent before with another request."""


def checked_key(value: str) -> str:
    """The header's value, or ValueError saying what a key must be."""
    if not 1 <= len(value) <= MAX_LENGTH or not all("\x21" <= c <= "\x7e" for c in value):
        raise ValueError(f"the {HEADER} header must be 1 to {MAX_LENGTH} printable ASCII characters without "
                         "spaces (a UUID is a good key)")
    return value


def request_digest(request: dict) -> str:
    return hashlib.sha256(json.dumps(request, sort_keys=True, separators=(",", ":"),
                                     ensure_ascii=False).encode()).hexdigest()


def _lock_key(token: WorkerToken, key: str) -> int:
    """The key's lock id: a signed 32-bit number from the token and the key."""
    return int.from_bytes(hashlib.sha256(f"{token.pk}:{key}".encode()).digest()[:4], "big", signed=True)


@transaction.atomic
def enqueue_with_key(*, token: WorkerToken, key: str, request: dict, actor: str) -> tuple[Job, bool]:
    """Enqueue `request` (enqueue_job's fields) under the token's `key`; the job, and whether the
    answer is a replay of the key's first request."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_xact_lock(%s, %s)", [LOCK_CLASS, _lock_key(token, key)])
        if not cursor.fetchone()[0]:
            raise KeyInFlight(f"a request with this {HEADER} is being enqueued now; ask again in "
                              f"{IN_FLIGHT_RETRY_AFTER_S} s for its answer")
    digest = request_digest(request)
    known = EnqueueKey.objects.filter(token=token, key=key).first()
    if known is not None and known.request_digest != digest:
        raise KeyReused(f"this {HEADER} was sent before with another request (job {known.job_id!r}); "
                        "nothing was enqueued: a new request takes a new key")
    job = services.enqueue_job(**request, actor=actor)
    if known is None:
        EnqueueKey.objects.create(token=token, key=key, request_digest=digest, job_id=job.job_id)
    return job, known is not None
