"""Reconciliation: claim due jobs, look them up at the provider, apply what was found.

A pass works in batches, each in three steps:

1. **Claim** up to `limit` due jobs in one statement (`UPDATE ... FROM (SELECT ... FOR UPDATE
   SKIP LOCKED)`): each is marked (next_check_at = now + claim TTL), so no other pass takes it,
   and a crashed reconciler's claim simply runs out.
2. **Look up** each job at its provider with no lock and no open transaction, a few at a time
   (`RECKON_RECONCILE_CONCURRENCY` threads; a lookup thread never touches the database: what a
   reconciler needs from the ledger is read beforehand), so a slow provider never holds a row
   lock against workers or operators.
3. **Apply** the whole batch's outcomes in one transaction through the transition layer's
   set-based form (`ledger.services.batch`): the jobs are locked, one ReconciliationCheck per
   look is written, and an outcome changes a job only if its attempt is still the one looked up
   (same version); otherwise the look is recorded and nothing changes. Each change is written
   with its ledger event in that transaction. A batch that fails is applied job by job, so one
   bad job never stops a pass.

`reconcile_until_idle` overlaps the steps: the next batch is claimed and looked up while the
current one is applied. `reconcile_job` is the same path for a batch of one.
"""

from __future__ import annotations

import logging
import random
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import connection, connections, transaction
from django.db.models import F, Max, Q
from django.utils.module_loading import import_string

from approvals.services import open_approval_request
from ledger.actions import get_action
from ledger.gate import record_pass
from ledger.models import Attempt, Job, LedgerEvent
from ledger.services.batch import Batch, insert_objects, latest_attempts, lock_jobs
from ledger.services.core import ClockTimestamp, latest_attempt, lock_job, record_unchanged
from ledger.states import FINISHED_JOB, ActorType, Execution, JobStatus, SideEffect
from reconciliation.models import Outcome, ReconciliationCheck
from reconciliation.reconcilers import Finding, prefetch_reported

log = logging.getLogger("reckon.reconciliation")

ACTOR = "reconciler"


def default_concurrency() -> int:
    """How many provider lookups a pass runs at once (RECKON_RECONCILE_CONCURRENCY, default 4)."""
    return max(1, settings.RECKON_RECONCILE_CONCURRENCY)


@dataclass(frozen=True)
class Decision:
    """What one look at one job led to (for logs, the command's output and tests)."""

    job_id: str
    outcome: str  # a reconciler outcome, or "not_queryable" / "superseded"
    applied: str  # what the ledger did: succeeded, replayed, awaiting_approval, escalated, ...
    note: str = ""

    def __str__(self) -> str:
        return f"{self.job_id}: {self.outcome} -> {self.applied}" + (f" ({self.note})" if self.note else "")


@dataclass(frozen=True)
class Look:
    """One job looked up: the attempt it was about and what was found (None: not queryable)."""

    job: Job
    attempt: Attempt
    reconciler: str | None
    finding: Finding | None
    duration_ms: int = 0


def backoff_seconds(check_count: int) -> float:
    """Exponential back-off with equal jitter: in [d/2, d], d = min(cap, base * 2**(n-1))."""
    delay = min(
        settings.RECKON_RECONCILE_BACKOFF_CAP,
        settings.RECKON_RECONCILE_BACKOFF_BASE * 2 ** max(check_count - 1, 0),
    )
    return delay / 2 + random.uniform(0, delay / 2)  # nosec B311  # back-off jitter, not security


def _due() -> Q:
    waiting = Q(status=JobStatus.NEEDS_RECONCILIATION) | Q(recovery_pending=True, status=JobStatus.PENDING)
    return waiting & (Q(next_check_at__isnull=True) | Q(next_check_at__lte=ClockTimestamp()))


def _claim(*, limit: int) -> list[Job]:
    """Mark up to `limit` due jobs as claimed by this pass, in one statement; return them, most
    overdue first. No two passes claim the same job (SKIP LOCKED, then the mark)."""
    due = (
        Job.objects.filter(_due())
        .order_by(F("next_check_at").asc(nulls_first=True), "pk")
        .values("pk", "next_check_at")[:limit]
    )
    select, params = due.query.sql_with_params()
    table = connection.ops.quote_name(Job._meta.db_table)
    ttl = timedelta(seconds=settings.RECKON_RECONCILE_CLAIM_TTL)
    jobs = list(
        Job.objects.raw(
            f"UPDATE {table} AS j SET next_check_at = clock_timestamp() + %s "  # nosec B608  # the table from the model, the subquery from the ORM with its parameters bound
            f"FROM ({select} FOR UPDATE SKIP LOCKED) AS due(id, was_due) WHERE j.id = due.id "
            "RETURNING j.*, due.was_due",
            [ttl, *params],
        )
    )
    jobs.sort(key=lambda job: (job.was_due is not None, job.was_due, job.pk))
    return jobs


def claim_due_jobs(*, limit: int) -> list[str]:
    """Claim up to `limit` due jobs (see `_claim`); their ids."""
    return [job.job_id for job in _claim(limit=limit)]


# -- looking up ----------------------------------------------------------------------------


class Lookups:
    """Runs provider lookups, `size` at a time: in `size` threads, so that they go on while the
    caller does something else, or, with `background=False` and a size of 1, inline at submit.

    A lookup thread uses no database connection; should a reconciler open one anyway, it is
    closed when its lookup ends.
    """

    def __init__(self, size: int | None = None, *, background: bool = True):
        self.size = max(1, size if size is not None else default_concurrency())
        threads = background or self.size > 1
        self._pool = ThreadPoolExecutor(self.size, thread_name_prefix="reckon-lookup") if threads else None

    def submit(self, fn, *args) -> Future:
        if self._pool is not None:
            return self._pool.submit(_in_lookup_thread, fn, *args)
        future = Future()
        try:
            future.set_result(fn(*args))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller through the future
            future.set_exception(exc)
        return future

    def map(self, fn, items) -> list:
        return [future.result() for future in [self.submit(fn, item) for item in items]]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> Lookups:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _in_lookup_thread(fn, *args):
    try:
        return fn(*args)
    finally:
        for opened in connections.all(initialized_only=True):
            opened.close()


def _eligible(job: Job, attempt: Attempt) -> bool:
    if job.status == JobStatus.NEEDS_RECONCILIATION:
        return attempt.execution_state == Execution.UNKNOWN
    # After a restore: a queued attempt is looked up by key before it may run.
    return (
        job.recovery_pending
        and job.status == JobStatus.PENDING
        and attempt.execution_state == Execution.NOT_STARTED
    )


def look_up(job: Job, attempt: Attempt, reconciler: str) -> Look:
    """Ask the provider (no lock, no transaction) and say what that proves."""
    started = time.monotonic()
    try:
        finding = import_string(reconciler)(job, attempt)
    except Exception as exc:  # a broken reconciler proves nothing either
        finding = Finding(Outcome.UNAVAILABLE, f"reconciler raised {type(exc).__name__}: {exc}")
    if finding.outcome == Outcome.NOT_FOUND and not finding.reason.strip():
        # "Not found" must say why a replay is safe; a lookup that cannot say so proves nothing.
        finding = Finding(Outcome.UNAVAILABLE, "not_found without a stated reason why a replay is safe",
                          evidence=finding.evidence)
    return Look(job, attempt, reconciler, finding, int((time.monotonic() - started) * 1000))


def _start_lookups(pool: Lookups, jobs: list[Job]) -> tuple[list[Decision], list[tuple[str, Future]]]:
    """Start looking the claimed jobs up; a job no longer waiting for reconciliation is not
    looked at. Returns those decisions, and each looked-up job's future Look (in claim order)."""
    attempts = latest_attempts(jobs)
    prefetch_reported([attempts[job.pk] for job in jobs if job.pk in attempts])
    early, looking = [], []
    for job in jobs:
        attempt = attempts.get(job.pk)
        if attempt is None or not _eligible(job, attempt):
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


def reconcile_due_jobs(*, limit: int | None = None, concurrency: int | None = None) -> list[Decision]:
    """One batch: claim due jobs, look them up, apply the outcomes (in one transaction)."""
    jobs = _claim(limit=limit or settings.RECKON_RECONCILE_BATCH)
    if not jobs:
        return []
    with Lookups(concurrency, background=False) as pool:  # nothing to overlap with: no thread for one
        early, looking = _start_lookups(pool, jobs)
        decided = {decision.job_id: decision for decision in early + _apply_done(looking)}
    return [decided[job.job_id] for job in jobs if job.job_id in decided]


def reconcile_until_idle(
    *, limit: int | None = None, budget_s: float | None = None, concurrency: int | None = None
) -> list[Decision]:
    """Batches until nothing is due now (backed-off jobs wait for their time), within a budget.

    Lookups and applying overlap: up to two claimed batches are being looked up while finished
    lookups are applied, a quarter of a batch or more at a time, at most a batch per transaction.
    """
    limit = limit or settings.RECKON_RECONCILE_BATCH
    chunk = max(1, limit // 4)
    started, decisions = time.monotonic(), []
    looking: list[tuple[str, Future]] = []
    claiming, completed = True, True
    with Lookups(concurrency) as pool:
        while True:
            if claiming and len(looking) < limit:  # keep the next batch queued behind this one
                if budget_s is not None and time.monotonic() - started > budget_s:
                    claiming, completed = False, False
                elif jobs := _claim(limit=limit):
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
        record_pass("reconciler")  # a completed pass keeps the dead-man gate open
    return decisions


def reconcile_job(*, job_id: str) -> Decision:
    """Look one job up at its provider and apply the outcome (a batch of one)."""
    job = Job.objects.get(job_id=job_id)
    attempt = latest_attempt(job)
    if not _eligible(job, attempt):
        return Decision(job_id, "superseded", job.status, "not waiting for reconciliation any more")
    reconciler = get_action(job.action).reconciler
    if reconciler is None:
        look = Look(job, attempt, None, None)
    else:
        prefetch_reported([attempt])
        look = look_up(job, attempt, reconciler)
    [decision] = _apply_batch([look])
    return decision


# -- applying ------------------------------------------------------------------------------


def apply_looks(looks: list[Look]) -> list[Decision]:
    """Apply a batch of looks in one transaction; if that fails, job by job (a job that still
    fails is logged and left to its claim's expiry, as a failed lookup would be)."""
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
    with transaction.atomic():
        jobs = lock_jobs(look.job.job_id for look in looks)
        attempts = latest_attempts(jobs.values())
        batch, checks, approvals = Batch(), [], []
        decisions = [
            _decide(batch, jobs[look.job.job_id], attempts[jobs[look.job.job_id].pk], look, checks, approvals)
            for look in looks
        ]
        insert_objects(checks)
        batch.flush()
        for job, attempt, reason, evidence in approvals:  # rare: one at a time, after the batch
            open_approval_request(
                job, attempt, requested_by=None, actor=ACTOR, actor_type=ActorType.RECONCILER,
                reason=reason, evidence=evidence,
            )
    return decisions


def _decide(batch: Batch, job: Job, attempt: Attempt, look: Look, checks: list, approvals: list) -> Decision:
    """The rules: what one look means for its job (under the job lock, written through `batch`)."""
    job_id, looked_at, finding = job.job_id, look.attempt, look.finding
    probe = attempt.execution_state == Execution.NOT_STARTED
    if finding is None:
        return _not_queryable(batch, job, attempt, looked_at, probe=probe)
    checks.append(
        ReconciliationCheck(
            job=job,
            attempt=looked_at,
            reconciler=look.reconciler,
            outcome=finding.outcome,
            evidence={**finding.evidence, "reason": finding.reason},
            error=finding.reason if finding.outcome == Outcome.UNAVAILABLE else "",
            duration_ms=look.duration_ms,
        )
    )
    if attempt.pk != looked_at.pk or attempt.version != looked_at.version or not _eligible(job, attempt):
        return Decision(job_id, finding.outcome, "superseded", "the job changed while we looked")
    evidence = {**finding.evidence, "reconciler": look.reconciler, "reason": finding.reason}
    if finding.outcome == Outcome.UNAVAILABLE:
        return _back_off(batch, job, attempt, finding, evidence, probe=probe)
    _resolved(batch, job)
    if finding.outcome == Outcome.CONFIRMED:
        batch.transition(
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
        batch.transition(
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
    return _not_found(batch, job, attempt, finding, evidence, approvals, probe=probe)


def _not_found(
    batch: Batch, job: Job, attempt: Attempt, finding: Finding, evidence: dict, approvals: list, *, probe: bool
) -> Decision:
    if probe:
        batch.record_unchanged(
            job,
            attempt,
            actor_type=ActorType.RECONCILER,
            actor=ACTOR,
            kind="recovery_released",
            note=f"released for work: {finding.reason}",
            evidence=evidence,
        )
        batch.dispatch_run(job)
        return Decision(job.job_id, finding.outcome, "released", finding.reason)
    batch.transition(
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
        replay = batch.open_next_attempt(
            job,
            attempt,
            actor=ACTOR,
            actor_type=ActorType.RECONCILER,
            note=f"replay with the same key: {finding.reason}",
        )
        return Decision(job.job_id, finding.outcome, "replayed" if replay else "failed", finding.reason)
    reason = f"irreversible action not found at the provider; replay needs approval: {finding.reason}"
    approvals.append((job, attempt, reason, evidence))
    return Decision(job.job_id, finding.outcome, "awaiting_approval", finding.reason)


def _back_off(batch: Batch, job: Job, attempt: Attempt, finding: Finding, evidence: dict, *, probe: bool) -> Decision:
    count = job.check_count + 1
    if count >= settings.RECKON_RECONCILE_MAX_CHECKS:
        note = f"{count} lookups gave no definite answer; a person must decide. Last: {finding.reason}"
        _to_operator(batch, job, attempt, kind="reconciliation_gave_up", note=note, evidence=evidence, probe=probe)
        return Decision(job.job_id, finding.outcome, "needs_operator", note)
    delay = backoff_seconds(count)
    next_check_at = job.db_now + timedelta(seconds=delay)
    batch.update_job(job, check_count=count, next_check_at=next_check_at)
    batch.record_unchanged(
        job,
        attempt,
        actor_type=ActorType.RECONCILER,
        actor=ACTOR,
        kind="reconciliation_unavailable",
        note=f"{finding.reason}; next look in {delay:.1f} s",
        evidence={**evidence, "check_count": count, "next_check_at": next_check_at.isoformat()},
    )
    return Decision(job.job_id, finding.outcome, f"retry in {delay:.1f} s", finding.reason)


def _to_operator(
    batch: Batch, job: Job, attempt: Attempt, *, kind: str, note: str, evidence: dict, probe: bool
) -> None:
    _resolved(batch, job)
    # A queued attempt under recovery is closed (it did nothing); an unknown one stays unknown.
    closing = {"execution_state": Execution.FAILED, "error": note} if probe else {}
    batch.transition(
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


def _not_queryable(batch: Batch, job: Job, attempt: Attempt, looked_at: Attempt, *, probe: bool) -> Decision:
    if attempt.pk != looked_at.pk or not _eligible(job, attempt):
        return Decision(job.job_id, "not_queryable", "superseded")
    note = (
        f"action {job.action} cannot be queried at its provider: a person must establish "
        "whether the effect happened"
    )
    _to_operator(batch, job, attempt, kind="not_queryable", note=note, evidence={}, probe=probe)
    return Decision(job.job_id, "not_queryable", "needs_operator", note)


def _resolved(batch: Batch, job: Job) -> None:
    """Reconciliation is over for this job: clear its schedule and any recovery hold."""
    batch.update_job(job, next_check_at=None, check_count=0, recovery_pending=False)


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
