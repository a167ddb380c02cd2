"""The wake-up for workers waiting over HTTP: a PostgreSQL NOTIFY when jobs become claimable.

Whenever the layer hands jobs to workers (`Batch.dispatch_run`: an enqueue, a retry, a replay,
a redispatch, a release by the gate or after recovery), the batch's flush sends one notification
per (tenant, action) on CHANNEL, in the caller's transaction: PostgreSQL delivers it when that
transaction commits, and never if it rolls back, so a woken waiter always finds the job
committed. The listener that turns notifications into wake-ups lives in each web process
(`api.waiting`); a lost notification costs a waiter one poll interval, never a job.
"""

from __future__ import annotations

import json
from collections.abc import Collection

from django.db import connection

CHANNEL = "reckon_claimable"


def notify_claimable(pairs: Collection[tuple[str, str]]) -> None:
    """Tell listeners that jobs of these (tenant, action) pairs can be claimed, on commit."""
    if not pairs:
        return
    payloads = [encode(tenant, action) for tenant, action in sorted(pairs)]
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_notify(%s, payload) FROM unnest(%s::text[]) AS payload", [CHANNEL, payloads])


def encode(tenant: str, action: str) -> str:
    return json.dumps([tenant, action], separators=(",", ":"))


def decode(payload: str) -> tuple[str, str] | None:
    """The (tenant, action) of a notification, or None when it is not one of ours."""
    try:
        tenant, action = json.loads(payload)
    except (ValueError, TypeError):
        return None
    if not isinstance(tenant, str) or not isinstance(action, str):
        return None
    return tenant, action
