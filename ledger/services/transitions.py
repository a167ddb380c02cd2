"""The one write path: every change to a job or an attempt, and every ledger event, goes through here.

A `Batch` queues changes to jobs whose row locks the caller holds: each call changes the
in-memory job and attempt at once and queues its writes; `flush()` then writes them all in the
caller's transaction —

1. one compare-and-set UPDATE per set of changed attempt columns (`version = version + n
   WHERE version = expected`; a miss under the job lock is a bug),
2. one multi-row INSERT of the attempts opened,
3. one UPDATE per set of changed job columns,
4. one multi-row INSERT of the events, in the order they were recorded (the hash chain is
   computed per row by the BEFORE INSERT trigger, which sees the rows inserted before it),

— and queues every job to be dispatched to a worker with one INSERT into django-q2's queue, in
the same transaction (see `dispatch_runs`), with a NOTIFY that wakes the workers waiting over
HTTP (`claimable.notify_claimable`). So every event is written in the same transaction as
its change, for one job (`with Batch() as batch:`, or `transition()`) or for hundreds
(reconciliation applies a whole batch of lookups at once).

One exception to "the change and its event together": a refusal changes nothing, and its event
must survive the exception that reports it. `record_refusal()` writes that event at once; the
caller lets its transaction commit, then raises.
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import DateTimeField, Func

from ledger import hooks
from ledger.actions import declared_action, policy_of
from ledger.models import Attempt, Job, LedgerEvent
from ledger.services.bulk import insert_objects, update_from_values
from ledger.services.claimable import notify_claimable
from ledger.services.errors import LedgerError
from ledger.snapshots import snapshot
from ledger.states import FINISHED_JOB, ActorType, EventKind, JobStatus


class ClockTimestamp(Func):
    """The database clock, advancing within a transaction (unlike now())."""

    template = "clock_timestamp()"
    output_field = DateTimeField()


# -- reading under the job lock --------------------------------------------------------------


def lock_job(*, job_id: str, skip_locked: bool = False) -> Job | None:
    """The job, row-locked for this transaction, with the database clock as `db_now`."""
    query = Job.objects.select_for_update(skip_locked=skip_locked).annotate(db_now=ClockTimestamp())
    if skip_locked:
        return query.filter(job_id=job_id).first()
    try:
        return query.get(job_id=job_id)
    except Job.DoesNotExist:
        raise LedgerError(f"no job with id {job_id!r}") from None


def lock_jobs(job_ids) -> dict[str, Job]:
    """Lock the jobs (in primary-key order, so two batches never deadlock), with the DB clock."""
    jobs = (
        Job.objects.select_for_update()
        .annotate(db_now=ClockTimestamp())
        .filter(job_id__in=list(job_ids))
        .order_by("pk")
    )
    return {job.job_id: job for job in jobs}


def latest_attempt(job: Job) -> Attempt:
    return Attempt.objects.filter(job=job).latest_per_job().first()


def latest_attempts(jobs) -> dict[int, Attempt]:
    """Each job's latest attempt, by job primary key, in one query."""
    attempts = Attempt.objects.filter(job_id__in=[job.pk for job in jobs]).latest_per_job()
    return {attempt.job_id: attempt for attempt in attempts}


# -- the batch ---------------------------------------------------------------------------------


class Batch:
    """Queued changes to locked jobs; `flush()` writes them (see the module docstring).

    As a context manager it flushes when the block ends without an exception.
    """

    def __init__(self) -> None:
        self._reset()

    def __enter__(self) -> Batch:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.flush()

    def _reset(self) -> None:
        self._attempts: dict[int, list] = {}  # pk -> [attempt, expected version, names changed]
        self._jobs: dict[int, list] = {}  # pk -> [job, names changed, touch updated_at]
        self._opened: list[Attempt] = []
        self._events: list[LedgerEvent] = []
        self._dispatch: list[str] = []
        self._claimable: set[tuple[str, str]] = set()  # (tenant, action) of the jobs handed to workers

    def transition(
        self,
        job: Job,
        attempt: Attempt,
        *,
        actor_type: str,
        actor: str,
        kind: EventKind,
        job_status: str | None = None,
        job_fields: dict | None = None,
        note: str = "",
        evidence: dict | None = None,
        **attempt_fields,
    ) -> LedgerEvent:
        """Compare-and-set the attempt, change the job (its status and fields), record the event."""
        before = snapshot(job, attempt)
        self.update_attempt(attempt, **attempt_fields)
        if job_status:
            self.set_job_status(job, job_status, **(job_fields or {}))
        elif job_fields:
            self.update_job(job, **job_fields)
        return self.record_event(
            job, attempt, actor_type=actor_type, actor=actor, kind=kind, before=before,
            after=snapshot(job, attempt), note=note, evidence=evidence,
        )

    def update_attempt(self, attempt: Attempt, **fields) -> None:
        """Attempt fields, compare-and-set on the version read under the job lock."""
        entry = self._attempts.setdefault(attempt.pk, [attempt, attempt.version, set()])
        entry[2].update(fields)
        for name, value in fields.items():
            setattr(attempt, name, value)
        attempt.version += 1

    def set_job_status(self, job: Job, status: str, **fields) -> None:
        """The job's status and any job fields changing with it."""
        if job.status != status or fields:
            self._job_entry(job, touch=True).update(("status", *fields))
            for name, value in fields.items():
                setattr(job, name, value)
        if job.status != status:
            job.status = status
            if status == JobStatus.NEEDS_RECONCILIATION:
                trigger_reconciliation()

    def update_job(self, job: Job, *, touch: bool = False, **fields) -> None:
        """Job fields that are not a status change (a schedule, a counter). `updated_at` moves
        only with `touch` (it says when the job last changed state or was last dispatched)."""
        self._job_entry(job, touch=touch).update(fields)
        for name, value in fields.items():
            setattr(job, name, value)

    def record_event(
        self,
        job: Job,
        attempt: Attempt | None,
        *,
        actor_type: str,
        actor: str,
        kind: EventKind,
        before: dict,
        after: dict,
        note: str = "",
        evidence: dict | None = None,
    ) -> LedgerEvent:
        event = LedgerEvent(
            job=job, attempt=attempt, actor_type=actor_type, actor=actor[:200], kind=kind,
            before=before, after=after, note=note, evidence=evidence or {},
        )
        self._events.append(event)
        return event

    def record_unchanged(self, job: Job, attempt: Attempt | None, **event) -> LedgerEvent:
        """An event that changes no state (a signal, a note): before and after are the same."""
        state = snapshot(job, attempt)
        return self.record_event(job, attempt, before=state, after=state, **event)

    def dispatch_run(self, job: Job) -> None:
        """Hand the job to a django-q2 worker, in this transaction (see `dispatch_runs`). Jobs of
        external actions are never queued: workers over HTTP claim them (`claim_next_job`), woken
        by the notification every dispatched job sends (`notify_claimable`)."""
        self._claimable.add((job.tenant, job.action))
        if getattr(job, "retry_at", None) is not None:
            self.update_job(job, retry_at=None)  # dispatched now: no longer waiting for its time
        action = declared_action(job.action)
        if action is not None and not action.external:
            self._dispatch.append(job.job_id)

    def open_attempt(self, job: Job, number: int) -> Attempt:
        """A new queued attempt; the caller records the event that says why."""
        attempt = Attempt(job=job, number=number)
        self._opened.append(attempt)
        return attempt

    def open_next_attempt(
        self, job: Job, previous: Attempt, *, actor: str, actor_type: str, note: str = "", dispatch: bool = True,
        one_more: bool = False,
    ) -> Attempt | None:
        """Queue the next attempt with the same idempotency key, or fail the job when none is left
        (`one_more`: a person's decision grants this attempt beyond the policy's number).

        `previous` is already closed (no live attempt remains). The new attempt is dispatched
        to a worker as this transaction commits, unless the caller leases it itself.
        """
        max_attempts = policy_of(job).max_attempts
        if previous.number >= max_attempts and not one_more:
            self.set_job_status(job, JobStatus.FAILED)
            self.record_unchanged(
                job, previous, actor_type=actor_type, actor=actor, kind=EventKind.ATTEMPTS_EXHAUSTED,
                note=f"all {max_attempts} attempts used; the job has failed",
            )
            return None
        attempt = self.open_attempt(job, previous.number + 1)
        before = {"job": job.status}
        self.set_job_status(job, JobStatus.PENDING)
        self.record_event(
            job, attempt, actor_type=actor_type, actor=actor, kind=EventKind.ATTEMPT_OPENED,
            before=before, after=snapshot(job, attempt),
            note=note or f"attempt {attempt.number} queued with the same key",
            evidence={"idempotency_key": job.idempotency_key, "previous_attempt": previous.number},
        )
        if dispatch:
            self.dispatch_run(job)
        return attempt

    def flush(self) -> None:
        """Write everything queued, within the caller's transaction (which holds the job locks)."""
        if not transaction.get_connection().in_atomic_block:
            raise RuntimeError("Batch.flush() must run inside the transaction holding the job locks")
        self._release_finished_holds()
        self._update_attempts()
        insert_objects(self._opened)
        self._update_jobs()
        insert_objects(self._events)
        dispatch_runs(self._dispatch)
        notify_claimable(self._claimable)
        self._reset()

    def _release_finished_holds(self) -> None:
        """Nobody stays on a finished job: its hold ends with it, recorded after the change."""
        for job, _, _ in list(self._jobs.values()):
            if job.status in FINISHED_JOB and job.holder:
                holder = job.holder
                attempt = next((e.attempt for e in reversed(self._events) if e.job is job), None)
                self.update_job(job, holder="", held_since=None)
                self.record_unchanged(
                    job, attempt, actor_type=ActorType.SYSTEM, actor="ledger", kind=EventKind.JOB_RELEASED,
                    note=f"released {holder}'s hold: the job is {job.status}", evidence={"released_from": holder},
                )

    def _job_entry(self, job: Job, *, touch: bool) -> set:
        entry = self._jobs.setdefault(job.pk, [job, set(), False])
        entry[2] = entry[2] or touch
        return entry[1]

    # Each UPDATE writes, for every row, every column any row changes: the objects were read
    # under the job locks in this transaction, so a column a row does not change is written
    # with the value it already has.

    def _update_attempts(self) -> None:
        if not self._attempts:
            return
        names = sorted(set().union(*(changed for _, _, changed in self._attempts.values())))
        fields = [Attempt._meta.get_field(name) for name in names]
        changed = update_from_values(
            Attempt,
            match=("id", "version"),
            names=(*names, "version"),
            rows=[
                ((attempt.pk, expected), (*(getattr(attempt, f.attname) for f in fields), attempt.version))
                for attempt, expected, _ in self._attempts.values()
            ],
            set_sql=("updated_at = STATEMENT_TIMESTAMP()",),
        )
        if len(changed) != len(self._attempts):
            missed = sorted(set(self._attempts) - set(changed))
            raise RuntimeError(f"attempts {missed} changed under the job lock; this is a bug")

    def _update_jobs(self) -> None:
        if not self._jobs:
            return
        names = sorted(set().union(*(changed for _, changed, _ in self._jobs.values())))
        fields = [Job._meta.get_field(name) for name in names]
        update_from_values(
            Job,
            match=("id",),
            names=names,
            rows=[
                ((job.pk,), tuple(getattr(job, f.attname) for f in fields), (touch,))
                for job, _, touch in self._jobs.values()
            ],
            extra=(("touch", "boolean"),),
            set_sql=("updated_at = CASE WHEN v.touch THEN STATEMENT_TIMESTAMP() ELSE t.updated_at END",),
        )


# -- a batch of one ------------------------------------------------------------------------------


def transition(job: Job, attempt: Attempt, **change) -> LedgerEvent:
    """`Batch.transition` for one job, written now."""
    with Batch() as batch:
        return batch.transition(job, attempt, **change)


def record_refusal(job: Job, attempt: Attempt | None, **event) -> LedgerEvent:
    """Record a refusal now (nothing changes). The caller lets its transaction commit, then
    raises: the refusal stays in the history although the caller's operation failed."""
    with Batch() as batch:
        return batch.record_unchanged(job, attempt, **event)


# -- the reconciler's claim --------------------------------------------------------------------


def claim_for_reconciliation(*, limit: int, actions=None, exclude_actions=(), tenants=None,
                             hold: timedelta | None = None) -> list[Job]:
    """Mark up to `limit` jobs due for reconciliation as claimed, in one statement
    (`WITH due AS MATERIALIZED (SELECT ... FOR UPDATE SKIP LOCKED) UPDATE ... FROM due`): their next look moves out by `hold`
    (the claim TTL by default), so no other pass or agent takes them and a crashed one's claim
    simply runs out. Only `actions` (when given) and not `exclude_actions`, only `tenants` (when
    given). Returns the jobs, most overdue first, each with `was_due` (its schedule before the claim)."""
    due = Job.objects.due_for_reconciliation(ClockTimestamp())
    if actions is not None:
        due = due.filter(action__in=list(actions))
    if exclude_actions:
        due = due.exclude(action__in=list(exclude_actions))
    if tenants is not None:
        due = due.filter(tenant__in=list(tenants))
    due = due.values("pk", "next_check_at")[:limit]
    select, params = due.query.sql_with_params()
    table = connection.ops.quote_name(Job._meta.db_table)
    hold = hold if hold is not None else timedelta(seconds=settings.RECKON_RECONCILE_CLAIM_TTL)
    # The locking SELECT is a MATERIALIZED CTE: evaluated once. As a subquery in FROM, a plan that
    # put the job table on the outer side of a nested loop ran it again for every outer row, and
    # each run skipped the rows this statement had just updated and locked the next due one: one
    # claim of `limit` 1 marked every due job (seen in CI, with stale planner statistics).
    jobs = list(
        Job.objects.raw(
            f"WITH due(id, was_due) AS MATERIALIZED ({select} FOR UPDATE SKIP LOCKED) "  # nosec B608  # the table from the model, the subquery from the ORM with its parameters bound
            f"UPDATE {table} AS j SET next_check_at = clock_timestamp() + %s "
            "FROM due WHERE j.id = due.id RETURNING j.*, due.was_due",
            [*params, hold],
        )
    )
    jobs.sort(key=lambda job: (job.was_due is not None, job.was_due, job.pk))
    return jobs


# -- dispatch ------------------------------------------------------------------------------------


def trigger_reconciliation() -> None:
    """Run a reconciliation pass soon after this commit (the schedule only fires each minute)."""
    if settings.RECKON_DISPATCH:
        transaction.on_commit(hooks.reconciliation_due)


def _enqueue_run(job_id: str, **options) -> None:
    from django_q.tasks import async_task

    from ledger.tasks import run_job  # the worker loop imports this layer: loaded late

    async_task(run_job, job_id, task_name=f"run_job:{job_id}"[:100], **options)


def dispatch_runs(job_ids: list[str]) -> None:
    """Hand the jobs to django-q2 workers.

    With django-q2's ORM broker on this database (Reckon's setup), the tasks (built and signed by
    `async_task` itself) are written into its queue in this very transaction, in one INSERT:
    they appear exactly when the change that calls for them commits, and never without it. Any
    other broker, or a synchronous or cached configuration, gets `async_task` per job once the
    transaction has committed.
    """
    if not job_ids or not settings.RECKON_DISPATCH:
        return
    from django_q.brokers import get_broker
    from django_q.brokers.orm import ORM
    from django_q.conf import Conf

    from ledger.queueing import CollectingBroker

    job_ids = list(job_ids)
    broker = get_broker()
    if type(broker) is ORM and Conf.ORM == connection.alias and not (Conf.SYNC or Conf.CACHED):
        collected = CollectingBroker(broker.list_key)
        for job_id in job_ids:
            _enqueue_run(job_id, broker=collected)
        collected.write()
    else:
        transaction.on_commit(lambda: [_enqueue_run(job_id) for job_id in job_ids])
