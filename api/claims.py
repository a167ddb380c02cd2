"""POST /api/v1/claims: which jobs a worker may be given, and waiting for one.

The scope is the token's tenants and actions, narrowed by the request's `tenants` and `actions`.
Without `actions`, only jobs of external actions are handed out: a job of an in-process action
(`executor = "python:..."`) goes to the django-q2 workers, and an HTTP worker takes one only when
it names that action (an HTTP worker that races a django-q2 worker for a job is harmless, since the
claim is fenced, but each lost race is recorded as a duplicate delivery).

A claim that finds nothing waits up to `wait_seconds` for work to arrive (see `api.waiting`),
without holding a database connection, and answers 204 if none came, saying why in
`Reckon-Reason` (and `Reckon-Detail`): `no_work`; `dead_man_gate`, when irreversible jobs in
scope are held because the sweeper or the reconciler is not running (with Retry-After); or
`cannot_wait`, when this server could not hold the wait (with Retry-After).
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings
from django.db import connection
from django.http import HttpResponse

from api.http import ApiError, check_reach
from api.models import ALL, WorkerToken
from api.waiting import ClaimWaits
from ledger import services
from ledger.actions import is_gateway_action, registered_actions
from ledger.gate import gate_status
from ledger.models import Job
from ledger.states import JobStatus

log = logging.getLogger("reckon.api.claims")
WAITS = ClaimWaits(limit=lambda: settings.RECKON_CLAIM_WAITS)


@dataclass(frozen=True)
class ClaimScope:
    actions: frozenset[str]
    tenants: frozenset[str] | None  # None: every tenant

    def covers(self, tenant: str, action: str) -> bool:
        return action in self.actions and (self.tenants is None or tenant in self.tenants)

    def __str__(self) -> str:
        tenants = ", ".join(sorted(self.tenants)) if self.tenants is not None else "every tenant"
        return f"{', '.join(sorted(self.actions)) or 'no action'} for {tenants}"


def claim_scope(token: WorkerToken, *, actions: list[str] | None, tenants: list[str] | None) -> ClaimScope:
    """The token's scope narrowed by the request; naming what the token may not see is refused."""
    check_reach(token, tenants=tenants, actions=actions, doing="claim")
    if actions is not None:
        chosen = frozenset(actions)
    else:
        # The MCP gateway runs its tools' jobs (`mcp:` actions) itself: a worker gets one only by
        # naming it, with a token that names it too (WorkerToken.reaches).
        chosen = frozenset(
            a.name for a in registered_actions()
            if a.external and not is_gateway_action(a.name) and token.reaches_action(a.name)
        )
    if tenants is not None:
        return ClaimScope(chosen, frozenset(tenants))
    return ClaimScope(chosen, None if ALL in token.tenants else frozenset(token.tenants))


# The headers of an empty answer, as the OpenAPI document describes them.
NOTHING_HEADERS = {
    "Reckon-Reason": {"description": "Why nothing was claimed: no_work, dead_man_gate, cannot_wait or client_gone.",
                      "schema": {"type": "string"}},
    "Reckon-Detail": {"description": "The reason in a sentence (for dead_man_gate: which loop is not running).",
                      "schema": {"type": "string"}},
    "Retry-After": {"description": "Seconds to wait before asking again, when the server knows.",
                    "schema": {"type": "integer", "minimum": 1}},
}


@dataclass(frozen=True)
class ClaimAnswer:
    lease: services.Lease | None  # the first (the oldest) of `leases`
    retry_after: int | None = None  # when to ask again: set when the wait could not be held, or the gate holds
    reason: str = "no_work"  # why no lease: no_work, dead_man_gate, cannot_wait, client_gone
    detail: str = ""
    leases: tuple[services.Lease, ...] = ()  # every lease of a claim of up to N jobs

    def nothing(self) -> HttpResponse:
        """The 204 of a claim that got nothing, with why and (when known) when to ask again."""
        response = HttpResponse(status=204)
        response["Reckon-Reason"] = self.reason
        if self.detail:
            response["Reckon-Detail"] = self.detail
        if self.retry_after is not None:
            response["Retry-After"] = str(self.retry_after)
        return response


def claim_next(
    token: WorkerToken, *, worker: str, scope: ClaimScope, wait_seconds: int, can_wait: bool,
    client_gone: Callable[[], bool] = lambda: False, limit: int = 1,
) -> ClaimAnswer:
    """Claim the oldest job in scope (up to `limit` of the oldest), waiting up to `wait_seconds` for
    one to arrive. A claim whose client has hung up while it waited takes nothing (its lease would
    only run out unused)."""
    taken: list[services.Lease] = []

    def claim() -> services.Lease | None:
        taken[:] = services.claim_next_jobs(worker=worker, limit=limit, actions=scope.actions, tenants=scope.tenants)
        return taken[0] if taken else None

    poll = max(settings.RECKON_CLAIM_POLL_S, 0.1)

    def answer(lease: services.Lease | None, *, waited: bool) -> ClaimAnswer:
        if lease is not None:
            return ClaimAnswer(lease, leases=tuple(taken))
        held = _held_by_the_gate(scope)
        if held:
            return ClaimAnswer(None, retry_after=_seconds(poll), reason="dead_man_gate", detail=held)
        if not waited:
            return ClaimAnswer(None, retry_after=_seconds(poll), reason="cannot_wait",
                               detail="this server could not hold the wait: ask again after Retry-After")
        return ClaimAnswer(None, detail="nothing claimable in scope came within the wait")

    if wait_seconds <= 0:
        return answer(claim(), waited=True)  # nothing to hold: an ordinary empty answer
    if not can_wait:  # a single-threaded server: a wait would stop the whole process
        return answer(claim(), waited=False)
    deadline = time.monotonic() + wait_seconds
    # Registered before the first look, so that work arriving during it wakes this claim.
    with WAITS.waiter(scope.covers) as waiter:
        if waiter is None:  # this process holds its share of waits: look once, come back later
            return answer(claim(), waited=False)
        first = True
        while True:
            waiter.arm()
            if not first and client_gone():
                log.debug("claim by %s ends: its client has gone", worker)
                return ClaimAnswer(None, reason="client_gone")
            if not first and not WorkerToken.objects.active().filter(pk=token.pk).exists():
                raise ApiError(401, "unauthorized", "the token was revoked while the claim waited")
            lease = claim()
            remaining = deadline - time.monotonic()
            if lease is not None or remaining <= 0:
                return answer(lease, waited=True)
            if first:
                log.debug("claim by %s waits up to %.0f s for %s", worker, remaining, scope)
                first = False
            connection.close()  # hold no database connection while waiting
            waiter.wait(min(remaining, poll))


def _held_by_the_gate(scope: ClaimScope) -> str:
    """Why the dead-man gate keeps jobs of this scope from the workers, or "" when it keeps none."""
    held = Job.objects.filter(gated_at__isnull=False, status=JobStatus.PENDING, action__in=scope.actions)
    if scope.tenants is not None:
        held = held.filter(tenant__in=scope.tenants)
    if not held.exists():
        return ""
    gate = gate_status()
    if gate.open:
        return ""  # reopened: the held jobs are being released to the workers
    return f"irreversible jobs in scope are held by the dead-man gate: {gate.reason}"


def _seconds(value: float) -> int:
    return max(1, round(value))


def client_gone_from(environ: dict) -> Callable[[], bool]:
    """Whether the client of this request has closed its connection, for servers that expose the
    socket (gunicorn: `gunicorn.socket`); elsewhere it never says so. The check peeks at a
    duplicate of the socket: an end of stream means gone; data, or nothing yet, means still there."""
    connected = environ.get("gunicorn.socket")
    if connected is None:
        return lambda: False

    def gone() -> bool:
        try:
            with socket.fromfd(connected.fileno(), connected.family, connected.type) as peek:
                return peek.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except BlockingIOError:
            return False
        except OSError:
            return True

    return gone

