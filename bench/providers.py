"""Respecting a provider's rate limit: a backlog of unknown jobs drained against a sandbox that
answers 429 above its limit.

The reconciler knows nothing of the limit in advance: its budget for the provider
(ledger.budget) learns it from the 429s. Judged against the ideal (jobs / limit: one lookup per
job, every second used to the limit) and by the share of requests answered 429.
"""

from __future__ import annotations

import multiprocessing
import time

from django.db import connections

from bench.generate import unknown_jobs
from chaos.world import World, wait_until
from ledger.budget import BUDGET
from ledger.models import Job

PREFIX = "/messages"  # mail.send's lookups: GET /messages?marker=


def unknown_backlog(*, count: int, prefix: str, action: str = "mail.send") -> list[str]:
    """`count` mail jobs whose only attempt sent its side effect and lost sight of it, all due for
    reconciliation now. Nothing is at the provider, so each lookup proves the mail was never sent."""
    names = [f"{prefix}-{n:07d}" for n in range(count)]
    unknown_jobs([(name, "bench", action, {"to": "a@bench.example", "subject": "s", "body": str(n)}, {})
                  for n, name in enumerate(names)])
    return names


def rate_limit(world: World, *, jobs: int, limit: float, concurrency: int | None = None) -> dict:
    """Drain `jobs` unknown mail jobs while the sandbox allows `limit` lookups a second; beside it,
    the same backlog drained with no limit, to show what Reckon itself manages on this machine."""
    from reconciliation.lookups import default_concurrency

    concurrency = concurrency or default_concurrency()
    unlimited_s, _, _ = _drain(world, "unlimited", jobs, None, concurrency)
    seconds, allowed, refused = _drain(world, "ratelimit", jobs, limit, concurrency)
    budget = next((row for row in BUDGET.snapshot() if row["provider"] == "mail"), {})
    # Two reconciler processes on one backlog, each with its own budget learning the one limit.
    two_s, two_allowed, two_refused = _drain(world, "ratelimit2", jobs, limit, concurrency, processes=2)
    ideal = jobs / limit
    return {"jobs": jobs, "limit_per_s": limit, "concurrency": concurrency, "seconds": round(seconds, 2),
            "ideal_s": round(ideal, 2), "drain_vs_ideal": round(seconds / ideal, 3),
            "drained_per_s": round(jobs / seconds, 1), "unlimited_drained_per_s": round(jobs / unlimited_s, 1),
            "requests": allowed + refused, "answered_429": refused,
            "share_429": round(refused / max(1, allowed + refused), 4),
            "pace_at_end_per_s": round(budget["rate"], 1) if budget.get("rate") else None,
            "two_processes_drain_vs_ideal": round(two_s / ideal, 3),
            "two_processes_share_429": round(two_refused / max(1, two_allowed + two_refused), 4)}


def _drain(world: World, prefix: str, jobs: int, limit: float | None, concurrency: int,
           processes: int = 1) -> tuple[float, int, int]:
    """Seconds to drain a fresh backlog with `processes` reconcilers (this one and forked ones),
    and the requests the limit allowed and refused."""
    unknown_backlog(count=jobs, prefix=prefix)
    BUDGET.forget()  # the reconciler starts knowing nothing of the limit
    world.sandbox.set_rate_limits({PREFIX: limit} if limit else {})
    timeout = jobs / (limit or 100) * 5 + 60
    connections.close_all()  # a forked process must open its own connection
    context = multiprocessing.get_context("fork")
    others = [context.Process(target=_drain_child, args=(prefix, concurrency, timeout)) for _ in range(processes - 1)]
    try:
        started = time.monotonic()
        for process in others:
            process.start()
        _drain_loop(prefix, concurrency, timeout)
        seconds = time.monotonic() - started
        for process in others:
            process.join(timeout=timeout)
        counts = world.sandbox.request("GET", "/_admin/rate_limits").json
    finally:
        world.sandbox.set_rate_limits({})
    return seconds, counts["allowed"].get(PREFIX, 0), counts["refused"].get(PREFIX, 0)


def _drain_child(prefix: str, concurrency: int, timeout: float) -> None:
    try:
        _drain_loop(prefix, concurrency, timeout)
    finally:
        connections.close_all()


def _drain_loop(prefix: str, concurrency: int, timeout: float) -> None:
    """Reconcile until no job of `prefix` waits; looks refused with a 429 come due again on their
    own (Retry-After, with jitter)."""
    from reconciliation.passes import reconcile_until_idle

    waiting = Job.objects.filter(job_id__startswith=f"{prefix}-", status="needs_reconciliation")
    wait_until(lambda: (reconcile_until_idle(limit=100, concurrency=concurrency), not waiting.exists())[1],
               timeout=timeout, what="the backlog to drain")
