"""Reconciliation: claim due jobs, look them up at the provider, apply what was found.

The claim marks the job (next_check_at = now + claim TTL) in a short `FOR UPDATE SKIP LOCKED`
transaction; the provider lookup then runs with no lock and no open transaction, so a slow
provider never holds a row lock against workers or operators. A crashed reconciler's claim
simply runs out. The outcome is applied under the job lock, only if the attempt is still the
one that was looked up (same version); otherwise the look is recorded and nothing changes.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import DateTimeField, DurationField, ExpressionWrapper, F, Max, Q, Value
from django.utils.module_loading import import_string

from approvals.services import open_approval_request
from ledger.actions import get_action
from ledger.gate import record_pass
from ledger.models import Attempt, Job, LedgerEvent
from ledger.services.core import (
    ClockTimestamp,
    dispatch_run,
    latest_attempt,
    lock_job,
    open_next_attempt,
    record_unchanged,
    transition,
)
from ledger.states import FINISHED_JOB, ActorType, Execution, JobStatus, SideEffect
from reconciliation.models import Outcome, ReconciliationCheck
from reconciliation.reconcilers import Finding

log = logging.getLogger("reckon.reconciliation")

ACTOR = "reconciler"


@dataclass(frozen=True)
class Decision:
    """What one look at one job led to (for logs, the command's output and tests)."""

    job_id: str
    outcome: str  # a reconciler outcome, or "not_queryable" / "superseded"
    applied: str  # what the ledger did: succeeded, replayed, awaiting_approval, escalated, ...
    note: str = ""

    def __str__(self) -> str:
        return f"{self.job_id}: {self.outcome} -> {self.applied}" + (f" ({self.note})" if self.note else "")


def backoff_seconds(check_count: int) -> float:
    """Exponential back-off with equal jitter: in [d/2, d], d = min(cap, base * 2**(n-1))."""
    delay = min(
        settings.RECKON_RECONCILE_BACKOFF_CAP,
        settings.RECKON_RECONCILE_BACKOFF_BASE * 2 ** max(check_count - 1, 0),
    )
    return delay / 2 + random.uniform(0, delay / 2)


def _due() -> Q:
    waiting = Q(status=JobStatus.NEEDS_RECONCILIATION) | Q(recovery_pending=True, status=JobStatus.PENDING)
    return waiting & (Q(next_check_at__isnull=True) | Q(next_check_at__lte=ClockTimestamp()))


def claim_due_jobs(*, limit: int) -> list[str]:
    """Mark up to `limit` due jobs as claimed by this pass; no two passes claim the same job."""
    ttl = timedelta(seconds=settings.RECKON_RECONCILE_CLAIM_TTL)
    with transaction.atomic():
        rows = list(
            Job.objects.select_for_update(skip_locked=True)
            .filter(_due())
            .order_by(F("next_check_at").asc(nulls_first=True), "pk")
            .values_list("pk", "job_id")[:limit]
        )
        Job.objects.filter(pk__in=[pk for pk, _ in rows]).update(
            next_check_at=ExpressionWrapper(
                ClockTimestamp() + Value(ttl, output_field=DurationField()), output_field=DateTimeField()
            )
        )
    return [job_id for _, job_id in rows]


def reconcile_due_jobs(*, limit: int | None = None) -> list[Decision]:
    """One batch: claim due jobs and reconcile each."""
    decisions = []
    for job_id in claim_due_jobs(limit=limit or settings.RECKON_RECONCILE_BATCH):
        try:
            decisions.append(reconcile_job(job_id=job_id))
        except Exception:  # one bad job must not stop the pass; its claim runs out and it is retried
            log.exception("reconciling job %s failed", job_id)
    return decisions


def reconcile_until_idle(*, limit: int | None = None, budget_s: float | None = None) -> list[Decision]:
    """Batches until nothing is due now (backed-off jobs wait for their time), within a budget."""
    started, decisions = time.monotonic(), []
    while True:
        batch = reconcile_due_jobs(limit=limit)
        decisions += batch
        if not batch:
            record_pass("reconciler")  # a completed pass keeps the dead-man gate open
            return decisions
        if budget_s is not None and time.monotonic() - started > budget_s:
            return decisions


def _eligible(job: Job, attempt: Attempt) -> bool:
    if job.status == JobStatus.NEEDS_RECONCILIATION:
        return attempt.execution_state == Execution.UNKNOWN
    # After a restore: a queued attempt is looked up by key before it may run.
    return (
        job.recovery_pending
        and job.status == JobStatus.PENDING
        and attempt.execution_state == Execution.NOT_STARTED
    )


def reconcile_job(*, job_id: str) -> Decision:
    """Look one job up at its provider and apply the outcome."""
    job = Job.objects.get(job_id=job_id)
    attempt = latest_attempt(job)
    if not _eligible(job, attempt):
        return Decision(job_id, "superseded", job.status, "not waiting for reconciliation any more")
    action = get_action(job.action)
    if action.reconciler is None:
        return _not_queryable(job_id, attempt)
    started = time.monotonic()
    try:
        finding = import_string(action.reconciler)(job, attempt)
    except Exception as exc:  # a broken reconciler proves nothing either
        finding = Finding(Outcome.UNAVAILABLE, f"reconciler raised {type(exc).__name__}: {exc}")
    if finding.outcome == Outcome.NOT_FOUND and not finding.reason.strip():
        # "Not found" must say why a replay is safe; a lookup that cannot say so proves nothing.
        finding = Finding(Outcome.UNAVAILABLE, "not_found without a stated reason why a replay is safe",
                          evidence=finding.evidence)
    duration_ms = int((time.monotonic() - started) * 1000)
    return _apply(job_id, attempt, finding, reconciler=action.reconciler, duration_ms=duration_ms)


def _apply(
    job_id: str, looked_at: Attempt, finding: Finding, *, reconciler: str, duration_ms: int
) -> Decision:
    with transaction.atomic():
        job = lock_job(job_id=job_id)
        attempt = latest_attempt(job)
        ReconciliationCheck.objects.create(
            job=job,
            attempt=looked_at,
            reconciler=reconciler,
            outcome=finding.outcome,
            evidence={**finding.evidence, "reason": finding.reason},
            error=finding.reason if finding.outcome == Outcome.UNAVAILABLE else "",
            duration_ms=duration_ms,
        )
        if attempt.pk != looked_at.pk or attempt.version != looked_at.version or not _eligible(job, attempt):
            return Decision(job_id, finding.outcome, "superseded", "the job changed while we looked")
        evidence = {**finding.evidence, "reconciler": reconciler, "reason": finding.reason}
        probe = attempt.execution_state == Execution.NOT_STARTED
        if finding.outcome == Outcome.UNAVAILABLE:
            return _back_off(job, attempt, finding, evidence, probe=probe)
        _resolved(job)
        if finding.outcome == Outcome.CONFIRMED:
            transition(
                job,
                attempt,
                actor_type=ActorType.RECONCILER,
                actor=ACTOR,
                kind="reconciled_confirmed",
                job_status=JobStatus.SUCCEEDED,
                execution_state=Execution.SUCCEEDED,
                side_effect_state=SideEffect.CONFIRMED,
                result_ref=finding.result_ref[:500],
                note=finding.reason,
                evidence=evidence,
            )
            return Decision(job_id, finding.outcome, "succeeded", finding.result_ref)
        if finding.outcome == Outcome.CONFLICT:
            closing = {"execution_state": Execution.FAILED, "error": finding.reason} if probe else {}
            transition(
                job,
                attempt,
                actor_type=ActorType.RECONCILER,
                actor=ACTOR,
                kind="reconciled_conflict",
                job_status=JobStatus.ESCALATED,
                note=finding.reason,
                evidence=evidence,
                **closing,
            )
            return Decision(job_id, finding.outcome, "escalated", finding.reason)
        return _not_found(job, attempt, finding, evidence, probe=probe)


def _not_found(job: Job, attempt: Attempt, finding: Finding, evidence: dict, *, probe: bool) -> Decision:
    if probe:
        record_unchanged(
            job,
            attempt,
            actor_type=ActorType.RECONCILER,
            actor=ACTOR,
            kind="recovery_released",
            note=f"released for work: {finding.reason}",
            evidence=evidence,
        )
        dispatch_run(job)
        return Decision(job.job_id, finding.outcome, "released", finding.reason)
    transition(
        job,
        attempt,
        actor_type=ActorType.RECONCILER,
        actor=ACTOR,
        kind="reconciled_not_found",
        execution_state=Execution.FAILED,
        side_effect_state=SideEffect.NOT_FOUND,
        note=finding.reason,
        evidence=evidence,
    )
    if get_action(job.action).reversible:
        replay = open_next_attempt(
            job,
            attempt,
            actor=ACTOR,
            actor_type=ActorType.RECONCILER,
            note=f"replay with the same key: {finding.reason}",
        )
        return Decision(job.job_id, finding.outcome, "replayed" if replay else "failed", finding.reason)
    open_approval_request(
        job,
        attempt,
        requested_by=None,
        actor=ACTOR,
        actor_type=ActorType.RECONCILER,
        reason=f"irreversible action not found at the provider; replay needs approval: {finding.reason}",
        evidence=evidence,
    )
    return Decision(job.job_id, finding.outcome, "awaiting_approval", finding.reason)


def _back_off(job: Job, attempt: Attempt, finding: Finding, evidence: dict, *, probe: bool) -> Decision:
    count = job.check_count + 1
    if count >= settings.RECKON_RECONCILE_MAX_CHECKS:
        note = f"{count} lookups gave no definite answer; a person must decide. Last: {finding.reason}"
        _to_operator(job, attempt, kind="reconciliation_gave_up", note=note, evidence=evidence, probe=probe)
        return Decision(job.job_id, finding.outcome, "needs_operator", note)
    delay = backoff_seconds(count)
    next_check_at = job.db_now + timedelta(seconds=delay)
    Job.objects.filter(pk=job.pk).update(check_count=count, next_check_at=next_check_at)
    record_unchanged(
        job,
        attempt,
        actor_type=ActorType.RECONCILER,
        actor=ACTOR,
        kind="reconciliation_unavailable",
        note=f"{finding.reason}; next look in {delay:.1f} s",
        evidence={**evidence, "check_count": count, "next_check_at": next_check_at.isoformat()},
    )
    return Decision(job.job_id, finding.outcome, f"retry in {delay:.1f} s", finding.reason)


def _to_operator(job: Job, attempt: Attempt, *, kind: str, note: str, evidence: dict, probe: bool) -> None:
    _resolved(job)
    # A queued attempt under recovery is closed (it did nothing); an unknown one stays unknown.
    closing = {"execution_state": Execution.FAILED, "error": note} if probe else {}
    transition(
        job,
        attempt,
        actor_type=ActorType.RECONCILER,
        actor=ACTOR,
        kind=kind,
        job_status=JobStatus.NEEDS_OPERATOR,
        note=note,
        evidence=evidence,
        **closing,
    )


def _not_queryable(job_id: str, looked_at: Attempt) -> Decision:
    with transaction.atomic():
        job = lock_job(job_id=job_id)
        attempt = latest_attempt(job)
        if attempt.pk != looked_at.pk or not _eligible(job, attempt):
            return Decision(job_id, "not_queryable", "superseded")
        note = (
            f"action {job.action} cannot be queried at its provider: a person must establish "
            "whether the effect happened"
        )
        _to_operator(
            job,
            attempt,
            kind="not_queryable",
            note=note,
            evidence={},
            probe=attempt.execution_state == Execution.NOT_STARTED,
        )
    return Decision(job_id, "not_queryable", "needs_operator", note)


def _resolved(job: Job) -> None:
    """Reconciliation is over for this job: clear its schedule and any recovery hold."""
    Job.objects.filter(pk=job.pk).update(next_check_at=None, check_count=0, recovery_pending=False)
    job.next_check_at, job.check_count, job.recovery_pending = None, 0, False


# -- restore ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Recovery:
    backup_point: object
    held: list[str]  # unfinished jobs now under recovery
    finished_in_window: list[str]  # touched near the backup point, but already finished


def hold_for_recovery(*, window_minutes: int, actor: str = "recover") -> Recovery:
    """After a restore: every unfinished job must be reconciled before any new side effect.

    Finished jobs stay finished (the restored ledger saw them finish, and a finished job never
    starts another effect); they are reported when they were touched within the window.
    """
    backup_point = LedgerEvent.objects.aggregate(newest=Max("at"))["newest"]
    if backup_point is None:
        return Recovery(None, [], [])
    since = backup_point - timedelta(minutes=window_minutes)
    touched = set(
        Job.objects.filter(events__at__gte=since, status__in=FINISHED_JOB).values_list("job_id", flat=True)
    )
    unfinished = list(
        Job.objects.exclude(status__in=FINISHED_JOB).order_by("pk").values_list("job_id", flat=True)
    )
    held = []
    for job_id in unfinished:
        with transaction.atomic():
            job = lock_job(job_id=job_id)
            if job.status in FINISHED_JOB:
                continue
            attempt = latest_attempt(job)
            Job.objects.filter(pk=job.pk).update(recovery_pending=True, next_check_at=None, check_count=0)
            job.recovery_pending = True
            record_unchanged(
                job,
                attempt,
                actor_type=ActorType.SYSTEM,
                actor=actor,
                kind="recovery_started",
                note=(
                    "the ledger was restored from a backup: no new side effect of this job until "
                    "reconciliation has looked it up at the provider"
                ),
                evidence={"backup_point": backup_point.isoformat(), "window_minutes": window_minutes},
            )
            held.append(job_id)
    return Recovery(backup_point, held, sorted(touched))
