"""A journaled call's lease, renewed while the upstream runs the call.

The lease is short (RECKON_MCP_GATEWAY_LEASE_S, whatever the tool's timeout) and a task beside the
upstream call renews it every third of its length, through the ledger's renew_lease (in a worker
thread: the ORM is synchronous). A gateway that dies mid-call stops renewing, so its calls' leases
run out within seconds and the next identical call, or the sweeper, makes them unknown. A renewal
the ledger refuses means the lease is no longer this call's (it ran out: the call is unknown, or
about to be): the renewing stops, the call goes on, and its result is recorded late or not at all
(gateway.calls.close_call).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
from anyio import to_thread
from django.conf import settings

from gateway import calls
from ledger.availability import drop_broken_connections

logger = logging.getLogger("reckon.gateway")
T = TypeVar("T")


async def while_renewed(go: calls.Go, work: Callable[[], Awaitable[T]]) -> T:
    """`await work()`, with go's lease renewed beside it until it ends (returns, raises or is
    cancelled: its exception or cancellation goes on as it came, never grouped)."""
    failure: Exception | None = None
    async with anyio.create_task_group() as beside:
        beside.start_soon(_keep_renewed, go)
        try:
            result = await work()
        except Exception as exc:  # raised after the task group, which would wrap it in a group
            failure = exc
        finally:
            beside.cancel_scope.cancel()
    if failure is not None:
        raise failure
    return result


async def in_thread(step):
    """`step()` in a worker thread, on a database connection that works: a thread's connection that
    broke (a failover) is dropped first, as Django does at each request, which a worker thread has not."""
    def fresh():
        drop_broken_connections()
        return step()

    return await to_thread.run_sync(fresh)


async def _keep_renewed(go: calls.Go) -> None:
    every = settings.RECKON_MCP_GATEWAY_LEASE_S / 3
    while True:
        await anyio.sleep(every)
        try:
            renewed = await in_thread(lambda: calls.renew_call(go))
        except Exception as exc:  # the database is away: try again; past the lease the call is unknown
            logger.warning("job %s: lease not renewed (%s: %s); trying again in %g s",
                           go.job_id, type(exc).__name__, exc, every)
            continue
        if not renewed:
            logger.warning("job %s: lease renewal refused (it ran out): the call is unknown, or about to be",
                           go.job_id)
            return
