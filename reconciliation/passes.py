"""Reconciliation passes: claim due jobs, look them up at the provider, apply what was found.

A pass works in batches, each in three steps:

1. **Claim** up to `limit` due jobs in one statement (the transition layer's
   `claim_for_reconciliation`: `FOR UPDATE SKIP LOCKED`, then a mark), so no other pass — on this
   host or another — takes them, and a crashed pass's claim simply runs out. Jobs whose action's
   agents reconcile them (pull mode, `reconciliation.pulling`) are left to those agents, and jobs
   whose webhook secret this process lacks to the processes that have it (`reconcile`).
2. **Look up** each job at its provider with no lock and no open transaction, a few at a time
   (`reconciliation.lookups`).
3. **Apply** the whole batch's outcomes in one transaction (`reconciliation.applying`, with the
   rules of `reconciliation.resolution`).

`reconcile_until_idle` overlaps the steps: the next batches are claimed and looked up while
finished lookups are applied, so that `concurrency` lookups are in flight all the time. `reconcile_job` is the same path for a batch of one.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future
from concurrent.futures import wait as futures_wait

from django.conf import settings

from ledger import rewind
from ledger.actions import PullReconciler, get_action, reconciled_elsewhere
from ledger.models import Job
from ledger.services import claim_for_reconciliation, complete_pass, latest_attempt, latest_attempts
from reconciliation.applying import Decision, apply_looks, waiting
from reconciliation.findings import prefetch_reported
from reconciliation.lookups import Look, Lookups, look_up

log = logging.getLogger("reckon.reconciliation")


def reconcile_until_idle(
    *, limit: int | None = None, budget_s: float | None = None, concurrency: int | None = None
) -> list[Decision]:
    """Batches until nothing is due now (backed-off jobs wait for their time), within a budget.

    Lookups and applying overlap, and lookups never wait for applying: batches are claimed ahead
    so that, while the finished lookups are applied (a quarter of a batch or more at a time, at
    most a batch per transaction), `concurrency` lookups stay in flight with a batch queued
    behind them. A claim is held for RECKON_RECONCILE_CLAIM_TTL: what is claimed ahead is at most
    a batch and `concurrency` lookups more than what is being looked up.
    """
    rewind.tick()  # the reconciler's loop is also a heartbeat of the ledger watch (at most once a second)
    limit = limit or settings.RECKON_RECONCILE_BATCH
    chunk = max(1, limit // 4)
    started, decisions = time.monotonic(), []
    looking: list[tuple[str, Future]] = []
    claiming, completed = True, True
    with Lookups(concurrency) as pool:
        ahead = pool.size + limit  # lookups not finished yet, below which the next batch is claimed
        while True:
            while claiming and sum(1 for _, future in looking if not future.done()) < ahead:
                if budget_s is not None and time.monotonic() - started > budget_s:
                    claiming, completed = False, False
                elif jobs := claim_for_reconciliation(limit=limit, exclude_actions=reconciled_elsewhere()):
                    early, started_now = _start_lookups(pool, jobs)
                    decisions += early
                    looking += started_now
                else:
                    claiming = False
            if not looking:
                break
            futures_wait([future for _, future in looking[:chunk]])
            done = [item for item in looking if item[1].done()][:limit]
            taken = {id(future) for _, future in done}
            looking = [item for item in looking if id(item[1]) not in taken]
            decisions += _apply_done(done)
    if completed:
        complete_pass("reconciler")  # a completed pass keeps the dead-man gate open
    return decisions


def reconcile_job(*, job_id: str) -> Decision:
    """Look one job up at its provider and apply the outcome (a batch of one)."""
    job = Job.objects.get(job_id=job_id)
    attempt = latest_attempt(job)
    if not waiting(job, attempt):
        return Decision(job_id, "superseded", job.status, "not waiting for reconciliation any more")
    reconciler = get_action(job.action).reconciler
    if isinstance(reconciler, PullReconciler):
        return Decision(job_id, "superseded", job.status, "its action's agents reconcile it (pull mode)")
    if reconciler is None:
        look = Look(job, attempt, None, None)
    else:
        prefetch_reported([attempt])
        look = look_up(job, attempt, reconciler)
    [decision] = apply_looks([look])
    return decision


def _start_lookups(pool: Lookups, jobs: list[Job]) -> tuple[list[Decision], list[tuple[str, Future]]]:
    """Start looking the claimed jobs up; a job no longer waiting for reconciliation is not
    looked at. Returns those decisions, and each looked-up job's future Look (in claim order)."""
    attempts = latest_attempts(jobs)
    prefetch_reported([attempts[job.pk] for job in jobs if job.pk in attempts])
    early, looking = [], []
    for job in jobs:
        attempt = attempts.get(job.pk)
        if attempt is None or not waiting(job, attempt):
            early.append(Decision(job.job_id, "superseded", job.status, "not waiting for reconciliation any more"))
            continue
        try:
            reconciler = get_action(job.action).reconciler
        except Exception:  # an unknown action: its claim runs out and it is retried
            log.exception("reconciling job %s failed", job.job_id)
            continue
        if reconciler is None:
            future = Future()
            future.set_result(Look(job, attempt, None, None))
        else:
            future = pool.submit(look_up, job, attempt, reconciler)
        looking.append((job.job_id, future))
    return early, looking


def _apply_done(looking: list[tuple[str, Future]]) -> list[Decision]:
    """Apply finished lookups (one transaction; see apply_looks)."""
    looks = []
    for job_id, future in looking:
        try:
            looks.append(future.result())
        except Exception:  # one bad job must not stop the pass; its claim runs out and it is retried
            log.exception("reconciling job %s failed", job_id)
    return apply_looks(looks)
