"""Set-based transitions: many jobs' changes in one transaction, in a handful of statements.

The transition layer's mechanics, for one job or many: `core.transition`, `core.set_job_status`
and `core.open_next_attempt` are a batch of one. For jobs whose row locks the caller holds:
each call changes the in-memory job and attempt at once and queues its writes; `flush()` then
writes them all —

1. one compare-and-set UPDATE ... FROM (VALUES ...) per set of changed attempt columns
   (`version = version + n WHERE version = expected`; a miss under the job lock is a bug),
2. one multi-row INSERT of the attempts opened,
3. one UPDATE ... FROM (VALUES ...) per set of changed job columns,
4. one multi-row INSERT of the events, in the order they were recorded (the hash chain is
   computed per row by the BEFORE INSERT trigger, which sees the rows inserted before it),

— and queues every job to be dispatched to a worker with one INSERT into django-q2's queue, in
the same transaction (see `dispatch_runs`). Every event is written in the same transaction as its change.
"""

from __future__ import annotations

import functools
import json
from datetime import date, datetime, time
from decimal import Decimal
from uuid import UUID

from django.conf import settings
from django.db import connection, transaction
from django.db.models import JSONField

from ledger.actions import get_action
from ledger.models import Attempt, Job, LedgerEvent
from ledger.services.core import ClockTimestamp, snapshot, trigger_reconciliation
from ledger.states import JobStatus


def lock_jobs(job_ids) -> dict[str, Job]:
    """Lock the jobs (in primary-key order, so two batches never deadlock), with the DB clock."""
    jobs = (
        Job.objects.select_for_update()
        .annotate(db_now=ClockTimestamp())
        .filter(job_id__in=list(job_ids))
        .order_by("pk")
    )
    return {job.job_id: job for job in jobs}


def latest_attempts(jobs) -> dict[int, Attempt]:
    """Each job's latest attempt, by job primary key, in one query."""
    attempts = (
        Attempt.objects.filter(job_id__in=[job.pk for job in jobs])
        .order_by("job_id", "-number")
        .distinct("job_id")
    )
    return {attempt.job_id: attempt for attempt in attempts}


class Batch:
    """Queued changes to locked jobs; `flush()` writes them (see the module docstring)."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._attempts: dict[int, list] = {}  # pk -> [attempt, expected version, names changed]
        self._jobs: dict[int, list] = {}  # pk -> [job, names changed, touch updated_at]
        self._opened: list[Attempt] = []
        self._events: list[LedgerEvent] = []
        self._dispatch: list[str] = []

    # -- the transition layer's operations, queued ------------------------------------------

    def transition(
        self,
        job: Job,
        attempt: Attempt,
        *,
        actor_type: str,
        actor: str,
        kind: str,
        job_status: str | None = None,
        job_fields: dict | None = None,
        note: str = "",
        evidence: dict | None = None,
        **attempt_fields,
    ) -> LedgerEvent:
        """Compare-and-set the attempt, change the job (its status and fields), record the event."""
        before = snapshot(job, attempt)
        entry = self._attempts.setdefault(attempt.pk, [attempt, attempt.version, set()])
        entry[2].update(attempt_fields)
        for name, value in attempt_fields.items():
            setattr(attempt, name, value)
        attempt.version += 1
        if job_status:
            self.set_job_status(job, job_status, **(job_fields or {}))
        return self.record_event(
            job,
            attempt,
            actor_type=actor_type,
            actor=actor,
            kind=kind,
            before=before,
            after=snapshot(job, attempt),
            note=note,
            evidence=evidence,
        )

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

    def update_job(self, job: Job, **fields) -> None:
        """Job fields that are not a status change (a schedule, a counter): updated_at stays."""
        self._job_entry(job, touch=False).update(fields)
        for name, value in fields.items():
            setattr(job, name, value)

    def record_event(
        self,
        job: Job,
        attempt: Attempt | None,
        *,
        actor_type: str,
        actor: str,
        kind: str,
        before: dict,
        after: dict,
        note: str = "",
        evidence: dict | None = None,
    ) -> LedgerEvent:
        event = LedgerEvent(
            job=job,
            attempt=attempt,
            actor_type=actor_type,
            actor=actor[:200],
            kind=kind,
            before=before,
            after=after,
            note=note,
            evidence=evidence or {},
        )
        self._events.append(event)
        return event

    def record_unchanged(self, job: Job, attempt: Attempt | None, **event) -> LedgerEvent:
        state = snapshot(job, attempt)
        return self.record_event(job, attempt, before=state, after=state, **event)

    def dispatch_run(self, job: Job) -> None:
        self._dispatch.append(job.job_id)

    def open_next_attempt(
        self, job: Job, previous: Attempt, *, actor: str, actor_type: str, note: str = "", dispatch: bool = True
    ) -> Attempt | None:
        """As core.open_next_attempt: queue the next attempt with the same key, or fail the job."""
        action = get_action(job.action)
        if previous.number >= action.max_attempts:
            self.set_job_status(job, JobStatus.FAILED)
            self.record_event(
                job,
                previous,
                actor_type=actor_type,
                actor=actor,
                kind="attempts_exhausted",
                before=snapshot(job, previous),
                after=snapshot(job, previous),
                note=f"all {action.max_attempts} attempts used; the job has failed",
            )
            return None
        attempt = Attempt(job=job, number=previous.number + 1)
        self._opened.append(attempt)
        before = {"job": job.status}
        self.set_job_status(job, JobStatus.PENDING)
        self.record_event(
            job,
            attempt,
            actor_type=actor_type,
            actor=actor,
            kind="attempt_opened",
            before=before,
            after=snapshot(job, attempt),
            note=note or f"attempt {attempt.number} queued with the same key",
            evidence={"idempotency_key": job.idempotency_key, "previous_attempt": previous.number},
        )
        if dispatch:
            self.dispatch_run(job)
        return attempt

    # -- writing ----------------------------------------------------------------------------

    def flush(self) -> None:
        """Write everything queued, within the caller's transaction (which holds the job locks)."""
        if not transaction.get_connection().in_atomic_block:
            raise RuntimeError("Batch.flush() must run inside the transaction holding the job locks")
        self._update_attempts()
        insert_objects(self._opened)
        self._update_jobs()
        insert_objects(self._events)
        dispatch_runs(self._dispatch)
        self._reset()

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
        changed = _update_from_values(
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
        _update_from_values(
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


def _json_value(field, value):
    """A column's value as JSON that PostgreSQL's jsonb_to_recordset reads back as that column."""
    if value is None:
        return None
    if isinstance(field, JSONField):
        return json.loads(json.dumps(value, cls=field.encoder)) if field.encoder else value
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, Decimal | UUID):
        return str(value)
    return value


def _records(fields, rows, extra=()) -> tuple[str, list[str], list]:
    """Rows of values for `fields` (then for `extra` columns, given as (alias, type)) as ONE
    jsonb parameter, unpacked in order by the database:

        ROWS FROM (jsonb_to_recordset(%s::jsonb) AS (c0 type, ...)) WITH ORDINALITY AS v(c0, ..., position)

    (one parameter rather than one per value: binding thousands of parameters costs far more
    than the statement). Returns the FROM item, the field columns' aliases and the parameters."""
    aliases = [f"c{i}" for i in range(len(fields))]
    types = [(f.target_field if f.is_relation else f).db_type(connection) for f in fields]
    names, types = aliases + [alias for alias, _ in extra], types + [kind for _, kind in extra]
    converters = [functools.partial(_json_value, f) for f in fields] + [lambda x: x] * len(extra)
    document = [
        {name: convert(value) for name, convert, value in zip(names, converters, row, strict=True)}
        for row in rows
    ]
    source = (
        f"ROWS FROM (jsonb_to_recordset(%s::jsonb) AS ({', '.join(f'{n} {t}' for n, t in zip(names, types, strict=True))})) "
        f"WITH ORDINALITY AS v({', '.join(names)}, position)"
    )
    return source, aliases, [json.dumps(document)]


def insert_objects(objs: list) -> None:
    """Insert unsaved model instances of one model in one statement, in order, and set their
    primary keys (`INSERT ... SELECT ... FROM <the rows as one jsonb> ORDER BY position`).
    Columns with a database default are left to it. Row triggers fire per row, in order."""
    if not objs:
        return
    model, quote = type(objs[0]), connection.ops.quote_name
    fields = [f for f in model._meta.concrete_fields if not f.primary_key and not f.has_db_default()]
    for obj in objs:  # a foreign key to an instance saved since it was assigned takes its id now
        obj._prepare_related_fields_for_save(operation_name="insert_objects")
    source, aliases, params = _records(fields, [[getattr(obj, f.attname) for f in fields] for obj in objs])
    sql = (
        f"INSERT INTO {quote(model._meta.db_table)} ({', '.join(quote(f.column) for f in fields)}) "  # nosec B608  # identifiers from model metadata, quoted; values bound as one jsonb parameter
        f"SELECT {', '.join(f'v.{a}' for a in aliases)} FROM {source} "
        f"ORDER BY v.position RETURNING {quote(model._meta.pk.column)}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        for obj, (pk,) in zip(objs, cursor.fetchall(), strict=True):
            obj.pk = pk
            obj._state.adding, obj._state.db = False, connection.alias


def _update_from_values(model, *, match, names, rows, extra=(), set_sql=()) -> list:
    """One statement for many rows, each with its own values:

        UPDATE t SET name = v.cJ, ... FROM <the rows as one jsonb> AS v WHERE t.match = v.cI AND ...

    Each row is (values of the `match` fields, values of the `names` fields to set[, values of
    the `extra` columns, which `set_sql` may use as v.alias]). Returns the primary keys changed.
    """
    quote = connection.ops.quote_name
    matched = [model._meta.get_field(name) for name in match]
    assigned = [model._meta.get_field(name) for name in names]
    if not rows or not (assigned or set_sql):
        return []
    source, aliases, params = _records(
        matched + assigned, [[*row[0], *row[1], *(row[2] if len(row) > 2 else ())] for row in rows], extra
    )
    assignments = [f"{quote(f.column)} = v.{a}" for f, a in zip(assigned, aliases[len(matched):], strict=True)]
    condition = " AND ".join(f"t.{quote(f.column)} = v.{a}" for f, a in zip(matched, aliases, strict=False))
    sql = (
        f"UPDATE {quote(model._meta.db_table)} AS t SET {', '.join(assignments + list(set_sql))} "  # nosec B608  # identifiers from model metadata, quoted; values bound as one jsonb parameter
        f"FROM {source} WHERE {condition} RETURNING t.{quote(model._meta.pk.column)}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [row[0] for row in cursor.fetchall()]


# -- dispatch ------------------------------------------------------------------------------------


def dispatch_runs(job_ids: list[str]) -> None:
    """core.dispatch_run for many jobs: hand them to django-q2 workers.

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
    from ledger.services.core import _enqueue_run

    job_ids = list(job_ids)
    broker = get_broker()
    if type(broker) is ORM and Conf.ORM == connection.alias and not (Conf.SYNC or Conf.CACHED):
        collected = CollectingBroker(broker.list_key)
        for job_id in job_ids:
            _enqueue_run(job_id, broker=collected)
        collected.write()
    else:
        transaction.on_commit(lambda: [_enqueue_run(job_id) for job_id in job_ids])
