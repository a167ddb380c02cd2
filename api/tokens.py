"""Issuing, revoking and checking worker tokens: the only code that writes WorkerToken rows."""

from __future__ import annotations

import getpass
import hashlib
import re
import secrets
from dataclasses import dataclass
from datetime import timedelta

import psycopg
from django.db import connection, transaction
from django.utils import timezone

from api.models import ALL, WorkerToken
from console.admin_trail import record_change, snapshot
from console.models import AdminAuditEntry
from ledger.actions import declared_action

TOKEN_PREFIX = "rk_"  # nosec B105  # the public prefix of worker tokens, not a secret
PREFIX_LENGTH = 10  # a token's first characters, its public name (WorkerToken.prefix)
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


class CommandLine:
    """Who issues or revokes a token from `manage.py worker_token` without naming a user: the
    operating-system account, as the admin trail records it."""

    pk = None

    def get_username(self) -> str:
        try:
            user = getpass.getuser()
        except (KeyError, OSError):
            user = "unknown"
        return f"cli (os user {user})"


def _issuer_name(user) -> str:
    return user.get_username()


def _trail_snapshot(worker_token: WorkerToken) -> dict:
    values = snapshot(worker_token)
    values.pop("token_hash", None)  # the trail names the token by its prefix, never by its hash
    return values


class IssuerRequired(ValueError):
    """The token could reach an irreversible action, and no active user issues it: nothing was written."""


def irreversible_reach(actions: list[str]) -> str:
    """What irreversible work a token of these actions can reach, in words; "" when none.

    A "*" always can: a token outlives the declarations it was issued under, and an irreversible
    action (an MCP tool among them) declared later would be in its reach with nobody behind it. A
    named action this process does not declare cannot be told reversible, so it counts as not."""
    if ALL in actions:
        return 'every action ("*": the irreversible ones, the MCP gateway\'s irreversible tools among them, as ' \
               "declared now or later)"
    declared = {name: declared_action(name) for name in actions}
    irreversible = sorted(name for name, action in declared.items() if action is not None and not action.reversible)
    undeclared = sorted(name for name, action in declared.items() if action is None)
    said = [f"the irreversible action(s) {', '.join(irreversible)}"] if irreversible else []
    if undeclared:
        said.append(f"action(s) {', '.join(undeclared)}, which nothing declares here, so not known to be reversible")
    return " and ".join(said)


@transaction.atomic
def worker_token_create(*, name: str, tenants, actions, created_by=None, issued_by=None) -> IssuedToken:
    """Issue a token. `created_by` is the user issuing it (an admin, or the user a command names);
    `issued_by` who records it in the admin trail when that is not a user (`CommandLine()`). The
    issuer is recorded on the token: nobody may approve a replay their token's answer led to, nor one
    its agent's call asks for. So a token that can reach an irreversible action (`irreversible_reach`)
    needs an active user behind it (IssuerRequired otherwise)."""
    name = (name or "").strip()
    if not name:
        raise ValueError("a token needs a name")
    tenants, actions = clean_scope("tenant", tenants), clean_scope("action", actions)
    reach = irreversible_reach(actions)
    if reach and (created_by is None or not created_by.is_active):
        nobody = "no person issues it" if created_by is None else f"{created_by.get_username()} is not an active user"
        raise IssuerRequired(
            f"token {name!r} can reach {reach}, and {nobody}: a token that can reach irreversible work needs a "
            "person behind it, who then may not approve what its calls and answers ask for. Issue it as an "
            "active user: manage.py worker_token create ... --by USERNAME, or in /admin/ signed in as one"
        )
    issuer = created_by or issued_by or CommandLine()
    while True:  # the prefix names the token and binds its leases: never two alike
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        if not WorkerToken.objects.filter(prefix=token[:PREFIX_LENGTH]).exists():
            break
    worker_token = WorkerToken.objects.create(
        name=name[:100],
        prefix=token[:PREFIX_LENGTH],
        token_hash=hash_token(token),
        tenants=tenants,
        actions=actions,
        created_by=created_by,
        issued_by=_issuer_name(issuer)[:200],
    )
    worker_token.refresh_from_db()
    record_change(issuer, AdminAuditEntry.ADDED, worker_token, {}, _trail_snapshot(worker_token))
    return IssuedToken(worker_token, token)


@transaction.atomic
def worker_token_revoke(*, worker_token: WorkerToken, by=None) -> WorkerToken:
    """Revoke at once; revoking twice keeps the first time. The revocation is in the admin trail."""
    before = _trail_snapshot(worker_token)
    revoked = WorkerToken.objects.filter(pk=worker_token.pk, revoked_at__isnull=True).update(
        revoked_at=timezone.now()
    )
    worker_token.refresh_from_db()
    if revoked:
        record_change(by or CommandLine(), AdminAuditEntry.CHANGED, worker_token, before,
                      _trail_snapshot(worker_token))
    return worker_token


# -- who holds a lease -----------------------------------------------------------------------------

def _printable(text: str) -> str:
    """The name as the API's worker names are written: printable ASCII, no space at either end."""
    return re.sub(r"[^\x21-\x7e]+", "-", text).strip("-") or "token"


def holder_tag(worker_token: WorkerToken) -> str:
    """What every actor name this token writes ends with: the token's name and its (unique) prefix."""
    return f" [token {_printable(worker_token.name)[:40]} {worker_token.prefix}]"


def holder_name(worker_token: WorkerToken, worker: str) -> str:
    """The name a worker (or an agent) of this token acts under: its own name, then the token's
    tag. A lease is owned by this name, so a write naming it from another token (whose tag is
    appended to whatever it sends) is no write of the lease's owner: the lease belongs to the
    token that claimed it. Naming it again from this token gives the same name."""
    tag = holder_tag(worker_token)
    if worker.endswith(tag):
        return worker
    return worker[: 200 - len(tag)].rstrip() + tag


def holds(worker_token: WorkerToken, owner: str) -> bool:
    """Was `owner` (a lease owner, an event's actor) written by this token?"""
    return bool(owner) and owner.endswith(holder_tag(worker_token))


def agent_tag(worker_token: WorkerToken) -> str:
    return f" (token {worker_token.prefix})"


def agent_name(worker_token: WorkerToken, client: str) -> str:
    """The name the MCP gateway's agent of this token acts under: `mcp:<token name>:<client>`, then
    the token's prefix, which names the token in every event its calls write (`token_of`: its issuer
    stands behind them). It is no worker-API holder's name (`holds` is false: the tag is another
    shape, and ends the name whatever the client calls itself), so no worker-API write of this token
    can pass for the gateway's lease."""
    tag = agent_tag(worker_token)
    return f"mcp:{worker_token.name}:{client}"[: 200 - len(tag)] + tag


# The prefix a worker's (holder_tag) or an agent's (agent_tag) name ends with, and the bracket after it.
TAGGED = re.compile(rf" ({TOKEN_PREFIX}[A-Za-z0-9_-]{{{PREFIX_LENGTH - len(TOKEN_PREFIX)}}})[)\]]$")


def token_of(actor: str) -> WorkerToken | None:
    """The token (revoked or not) whose worker or agent wrote under `actor`: a lease owner or an
    event's actor, as `holder_name` and `agent_name` make them; None for any other name."""
    tagged = TAGGED.search(actor or "")
    worker_token = WorkerToken.objects.filter(prefix=tagged.group(1)).first() if tagged else None
    if worker_token is None or not actor.endswith((holder_tag(worker_token), agent_tag(worker_token))):
        return None
    return worker_token


def issuer_of(actor: str):
    """The person who issued the token behind `actor` (None: no token's name, or nobody issued it)."""
    worker_token = token_of(actor)
    return worker_token.created_by if worker_token is not None else None


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
    # The lookup is this request's first statement (it bypasses Django's cursor, so no health check
    # ran before it) and it answered: that is the health check (CONN_HEALTH_CHECKS) Django would
    # otherwise run, as one more round trip (SELECT 1), when the request's step opens its transaction.
    connection.health_check_done = True
    if row is None:
        return None
    worker_token = WorkerToken.from_db(connection.alias, ACTIVE_TOKEN_FIELDS, row)
    for field in JSON_FIELDS:
        setattr(worker_token, field.attname, field.from_db_value(getattr(worker_token, field.attname), None, connection))
    return worker_token
