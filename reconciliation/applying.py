"""Applying what lookups found: a batch of looks in one transaction, through the transition layer.

The jobs are locked, one ReconciliationCheck per look is written, and an outcome changes a job
only if its attempt is still the one looked up (same version) and still waiting; otherwise the
look is recorded and nothing changes. The rules themselves are `reconciliation.resolution`'s,
shared with operators' decisions. A batch that fails is applied job by job, so one bad job never
stops a pass.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import transaction

from ledger.models import Attempt, Job
from ledger.services import Batch, insert_objects, latest_attempts, lock_jobs
from ledger.states import ActorType, EventKind, Execution, JobStatus
from reconciliation import fastpath, resolution
from reconciliation.findings import Finding
from reconciliation.lookups import Look
from reconciliation.models import CheckOutcome, ReconciliationCheck
from reconciliation.providers import publish as publish_provider_states

log = logging.getLogger("reckon.reconciliation")

RECONCILER = resolution.By("reconciler", ActorType.RECONCILER)


@dataclass(frozen=True)
class Decision:
    """What one look at one job led to (for logs, the command's output and tests)."""

    job_id: str
    outcome: str  # a CheckOutcome, or "not_queryable" / "superseded"
    applied: str  # what the ledger did: succeeded, replayed, awaiting_approval, escalated, ...
    note: str = ""

    def __str__(self) -> str:
        return f"{self.job_id}: {self.outcome} -> {self.applied}" + (f" ({self.note})" if self.note else "")


def waiting(job: Job, attempt: Attempt) -> bool:
    """Is this job (still) waiting for reconciliation to look its latest attempt up?"""
    if job.status == JobStatus.NEEDS_RECONCILIATION:
        return attempt.execution_state == Execution.UNKNOWN
    # After a restore: a queued attempt is looked up by key before it may run.
    return (
        job.recovery_pending
        and job.status == JobStatus.PENDING
        and attempt.execution_state == Execution.NOT_STARTED
    )


def backoff_seconds(check_count: int) -> float:
    """Exponential back-off with equal jitter: in [d/2, d], d = min(cap, base * 2**(n-1))."""
    delay = min(
        settings.RECKON_RECONCILE_BACKOFF_CAP,
        settings.RECKON_RECONCILE_BACKOFF_BASE * 2 ** max(check_count - 1, 0),
    )
    return delay / 2 + random.uniform(0, delay / 2)  # nosec B311  # back-off jitter, not security


def apply_looks(looks: list[Look]) -> list[Decision]:
    """Apply a batch of looks in one transaction; if that fails, job by job (a job that still
    fails is logged and left to its claim's expiry, as a failed lookup would be)."""
    publish_provider_states()  # what these lookups taught this process's budget, for the console
    if len(looks) > 1:
        try:
            return _apply_batch(looks)
        except Exception:
            log.exception("applying a batch of %d looks failed; applying them one by one", len(looks))
    decisions = []
    for look in looks:
        try:
            decisions += _apply_batch([look])
        except Exception:  # one bad job must not stop the pass; its claim runs out and it is retried
            log.exception("reconciling job %s failed", look.job.job_id)
    return decisions


def _apply_batch(looks: list[Look]) -> list[Decision]:
    """The common outcomes by the database function (reconciliation.fastpath), one call for the
    batch; the rest, and what it declines, through the transition layer; one transaction."""
    prepared = [fastpath.prepare(look, look.by or RECONCILER, backoff_seconds=backoff_seconds, jitter=_jitter)
                for look in looks]
    fast = [(n, look, ready) for n, (look, ready) in enumerate(zip(looks, prepared, strict=True)) if ready]
    rest = [(n, look) for n, (look, ready) in enumerate(zip(looks, prepared, strict=True)) if ready is None]
    decisions: dict[int, Decision] = {}
    with transaction.atomic():
        if fast and rest:  # every job of the batch locked at once, in primary-key order (no deadlock)
            fastpath.lock([look.job.job_id for look in looks])
        batch = Batch()
        for (n, look, ready), applied in zip(fast, fastpath.apply([ready.row for _, _, ready in fast]), strict=True):
            if applied == fastpath.DECLINED:
                rest.append((n, look))
            elif applied == fastpath.SUPERSEDED:
                decisions[n] = Decision(look.job.job_id, look.finding.outcome, "superseded",
                                        "the job changed while we looked")
            else:
                decisions[n] = Decision(look.job.job_id, look.finding.outcome, ready.applied, ready.note)
                if applied == "replayed":
                    batch.dispatch_run(look.job)
        if rest:
            jobs = lock_jobs(look.job.job_id for _, look in rest)
            attempts = latest_attempts(jobs.values())
            checks = []
            for n, look in rest:
                job = jobs[look.job.job_id]
                decisions[n] = _apply_look(batch, job, attempts[job.pk], look, checks)
            insert_objects(checks)
        batch.flush()
    return [decisions[n] for n in range(len(looks)) if n in decisions]


def _jitter() -> float:
    """A not-asked look's delay factor: jitter so that deferred jobs do not all come back at once."""
    return 1 + random.uniform(0, 0.5)  # nosec B311  # jitter, not security


def _apply_look(batch: Batch, job: Job, attempt: Attempt, look: Look, checks: list) -> Decision:
    """What one look means for its job (under the job lock, written through `batch`)."""
    job_id, looked_at, finding = job.job_id, look.attempt, look.finding
    probe = attempt.execution_state == Execution.NOT_STARTED
    if finding is None:
        return _not_queryable(batch, job, attempt, looked_at)
    checks.append(
        ReconciliationCheck(
            job=job,
            attempt=looked_at,
            reconciler=look.reconciler,
            asked=finding.asked[:500],
            outcome=finding.outcome,
            evidence={**finding.evidence, "reason": finding.reason},
            error=finding.reason if finding.outcome == CheckOutcome.UNAVAILABLE else "",
            duration_ms=look.duration_ms,
        )
    )
    if attempt.pk != looked_at.pk or attempt.version != looked_at.version or not waiting(job, attempt):
        return Decision(job_id, finding.outcome, "superseded", "the job changed while we looked")
    evidence = {**finding.evidence, "reconciler": look.reconciler, "reason": finding.reason,
                **({"asked": finding.asked} if finding.asked else {})}
    by = look.by or RECONCILER
    if finding.outcome == CheckOutcome.UNAVAILABLE:
        return _back_off(batch, job, attempt, finding, evidence, by)
    if finding.outcome == CheckOutcome.CONFIRMED:
        resolution.confirm(batch, job, attempt, by=by, kind=EventKind.RECONCILED_CONFIRMED,
                           note=finding.reason, evidence=evidence, result_ref=finding.result_ref)
        return Decision(job_id, finding.outcome, "succeeded", finding.result_ref)
    if finding.outcome == CheckOutcome.CONFLICT:
        resolution.escalate(batch, job, attempt, by=by, kind=EventKind.RECONCILED_CONFLICT,
                            note=finding.reason, evidence=evidence)
        return Decision(job_id, finding.outcome, "escalated", finding.reason)
    if probe:  # under recovery, the queued attempt was never sent: it may run now
        resolution.release_from_recovery(batch, job, attempt, by=by, note=finding.reason,
                                         evidence=evidence)
        return Decision(job_id, finding.outcome, "released", finding.reason)
    applied = resolution.not_found(
        batch, job, attempt, by=by, kind=EventKind.RECONCILED_NOT_FOUND, note=finding.reason,
        evidence=evidence,
        approval_reason=f"irreversible action not found at the provider; replay needs approval: {finding.reason}",
    )
    return Decision(job_id, finding.outcome, applied, finding.reason)


def _back_off(batch: Batch, job: Job, attempt: Attempt, finding: Finding, evidence: dict,
              by: resolution.By = RECONCILER) -> Decision:
    if finding.retry_in is not None:
        return _not_asked(batch, job, attempt, finding, evidence, by)
    count = job.check_count + 1
    if count >= settings.RECKON_RECONCILE_MAX_CHECKS:
        note = f"{count} lookups gave no definite answer; a person must decide. Last: {finding.reason}"
        resolution.to_operator(batch, job, attempt, by=by, kind=EventKind.RECONCILIATION_GAVE_UP,
                               note=note, evidence=evidence)
        return Decision(job.job_id, finding.outcome, "needs_operator", note)
    delay = backoff_seconds(count)
    next_check_at = job.db_now + timedelta(seconds=delay)
    batch.update_job(job, check_count=count, next_check_at=next_check_at)
    batch.record_unchanged(
        job,
        attempt,
        **by.fields,
        kind=EventKind.RECONCILIATION_UNAVAILABLE,
        note=f"{finding.reason}; next look in {delay:.1f} s",
        evidence={**evidence, "check_count": count, "next_check_at": next_check_at.isoformat()},
    )
    return Decision(job.job_id, finding.outcome, f"retry in {delay:.1f} s", finding.reason)


def _not_asked(batch: Batch, job: Job, attempt: Attempt, finding: Finding, evidence: dict,
               by: resolution.By = RECONCILER) -> Decision:
    """The provider was not really asked (rate limited, or its circuit is open): the look proves
    nothing and does not count towards RECKON_RECONCILE_MAX_CHECKS; ask again when it says, with
    jitter so the deferred jobs do not all come back at once."""
    delay = finding.retry_in * _jitter()
    next_check_at = job.db_now + timedelta(seconds=delay)
    batch.update_job(job, next_check_at=next_check_at)
    batch.record_unchanged(
        job,
        attempt,
        **by.fields,
        kind=EventKind.RECONCILIATION_UNAVAILABLE,
        note=f"{finding.reason}; not counted as a look; next look in {delay:.1f} s",
        evidence={**evidence, "check_count": job.check_count, "not_counted": True,
                  "next_check_at": next_check_at.isoformat()},
    )
    return Decision(job.job_id, finding.outcome, f"not asked, again in {delay:.1f} s", finding.reason)


def _not_queryable(batch: Batch, job: Job, attempt: Attempt, looked_at: Attempt) -> Decision:
    if attempt.pk != looked_at.pk or not waiting(job, attempt):
        return Decision(job.job_id, "not_queryable", "superseded")
    note = (
        f"action {job.action} cannot be queried at its provider: a person must establish "
        "whether the effect happened"
    )
    resolution.to_operator(batch, job, attempt, by=RECONCILER, kind=EventKind.NOT_QUERYABLE, note=note,
                           evidence={})
    return Decision(job.job_id, "not_queryable", "needs_operator", note)
