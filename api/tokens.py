"""Issuing, revoking and checking worker tokens: the only code that writes WorkerToken rows."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import timedelta

import psycopg
from django.db import connection, transaction
from django.utils import timezone

from api.models import ALL, WorkerToken

TOKEN_PREFIX = "rk_"  # nosec B105  # the public prefix of worker tokens, not a secret
# last_used_at is a hint for admins, not an audit trail: refresh it at most this often.
LAST_USED_GRANULARITY = timedelta(seconds=60)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class IssuedToken:
    worker_token: WorkerToken
    token: str  # shown once, never stored


def clean_scope(name: str, values) -> list[str]:
    if isinstance(values, str):
        values = [values]
    cleaned = sorted({str(v).strip() for v in values or [] if str(v).strip()})
    if not cleaned:
        raise ValueError(f"give at least one {name} (or {ALL!r} for all)")
    return [ALL] if ALL in cleaned else cleaned


@transaction.atomic
def worker_token_create(*, name: str, tenants, actions, created_by=None) -> IssuedToken:
    name = (name or "").strip()
    if not name:
        raise ValueError("a token needs a name")
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    worker_token = WorkerToken.objects.create(
        name=name[:100],
        prefix=token[:10],
        token_hash=hash_token(token),
        tenants=clean_scope("tenant", tenants),
        actions=clean_scope("action", actions),
        created_by=created_by,
    )
    return IssuedToken(worker_token, token)


def worker_token_revoke(*, worker_token: WorkerToken) -> WorkerToken:
    """Revoke at once; revoking twice keeps the first time."""
    WorkerToken.objects.filter(pk=worker_token.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
    worker_token.refresh_from_db(fields=["revoked_at"])
    return worker_token


def authenticate(authorization: str) -> WorkerToken | None:
    """The active token named by an `Authorization: Bearer <token>` header, or None."""
    scheme, _, token = (authorization or "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token.startswith(TOKEN_PREFIX) or len(token) > 200:
        return None
    worker_token = _active_token(hash_token(token))
    if worker_token is None:
        return None
    now = timezone.now()
    if worker_token.last_used_at is None or now - worker_token.last_used_at > LAST_USED_GRANULARITY:
        WorkerToken.objects.filter(pk=worker_token.pk).update(last_used_at=now)
        worker_token.last_used_at = now
    return worker_token


# Every API request asks this: one statement, bound server-side so that psycopg prepares it after
# a few calls on a connection, instead of a queryset compiled afresh each time.
ACTIVE_TOKEN_FIELDS = [field.attname for field in WorkerToken._meta.concrete_fields]
ACTIVE_TOKEN = (
    f"SELECT {', '.join(field.column for field in WorkerToken._meta.concrete_fields)} "  # nosec B608  # names from the model; the hash is bound
    f"FROM {WorkerToken._meta.db_table} WHERE token_hash = %s AND revoked_at IS NULL"
)
JSON_FIELDS = [WorkerToken._meta.get_field(name) for name in ("tenants", "actions")]


def _active_token(token_hash: str) -> WorkerToken | None:
    """WorkerToken.objects.active().get(token_hash=...), or None."""
    connection.ensure_connection()
    raw = psycopg.Cursor(connection.connection)
    with (connection.make_debug_cursor(raw) if connection.queries_logged else connection.make_cursor(raw)) as cursor:
        cursor.execute(ACTIVE_TOKEN, [token_hash])
        row = cursor.fetchone()
    if row is None:
        return None
    worker_token = WorkerToken.from_db(connection.alias, ACTIVE_TOKEN_FIELDS, row)
    for field in JSON_FIELDS:
        setattr(worker_token, field.attname, field.from_db_value(getattr(worker_token, field.attname), None, connection))
    return worker_token
