"""Job, Attempt and LedgerEvent: what is known about each piece of work, and how we learnt it.

The database guards the rules (CHECK constraints, a partial unique index, an append-only
trigger); `ledger.services` is the only code that changes these rows.
"""

from __future__ import annotations

import pgtrigger
from django.contrib.postgres.indexes import GinIndex, OpClass
from django.db import models
from django.db.models import Q
from django.db.models.functions import Now, Upper

from ledger.states import (
    CONSISTENCY,
    LIVE_EXECUTION,
    UNKNOWN_WORK,
    ActorType,
    Delivery,
    EventKind,
    Execution,
    JobStatus,
    SideEffect,
)

# A job a worker may claim: pending, not under recovery, not held by the dead-man gate (the same rule
# in SQL: ledger.stepsql.CLAIMABLE).
CLAIMABLE = Q(status=JobStatus.PENDING, recovery_pending=False, gated_at__isnull=True)


def _one_of(field: str, choices) -> Q:
    return Q(**{f"{field}__in": [c.value if hasattr(c, "value") else c for c in choices]})


class JobQuerySet(models.QuerySet):
    def counts_by_status(self) -> dict[str, int]:
        rows = self.order_by().values_list("status").annotate(n=models.Count("id"))
        return {status: n for status, n in rows}

    def due_for_reconciliation(self, now) -> JobQuerySet:
        """Unknown work (and, after a restore, queued work under recovery) whose next look is due
        at `now`, most overdue first (served by the job_reconcile_due index)."""
        waiting = Q(status=JobStatus.NEEDS_RECONCILIATION) | Q(recovery_pending=True, status=JobStatus.PENDING)
        due = Q(next_check_at__isnull=True) | Q(next_check_at__lte=now)
        return self.filter(waiting & due).order_by(models.F("next_check_at").asc(nulls_first=True), "pk")


class AttemptQuerySet(models.QuerySet):
    def latest_per_job(self) -> AttemptQuerySet:
        """Each job's latest attempt (the highest number), one row per job."""
        return self.order_by("job_id", "-number").distinct("job_id")


class Job(models.Model):
    job_id = models.CharField(max_length=200, unique=True)
    tenant = models.CharField(max_length=100)
    action = models.CharField(max_length=100)
    payload = models.JSONField()
    identity = models.JSONField(default=dict, blank=True)
    # The action's policy when the job was enqueued (ledger.actions.Policy): what decides replays,
    # whatever the declaration says later. Null for jobs enqueued before snapshots.
    policy = models.JSONField(null=True, blank=True)
    idempotency_key = models.CharField(max_length=320, unique=True)
    status = models.CharField(max_length=24, choices=JobStatus.choices, default=JobStatus.PENDING)
    lease_seq = models.BigIntegerField(default=0)
    # Reconciliation's schedule: when to look again, and how many looks found nothing definite.
    next_check_at = models.DateTimeField(null=True, blank=True)
    check_count = models.PositiveIntegerField(default=0)
    # Set by `recover` after a restore: no new side effect until reconciliation has looked.
    recovery_pending = models.BooleanField(default=False)
    # Deliveries refused because the job was already leased or finished: a signal, shown to humans.
    duplicate_deliveries = models.PositiveIntegerField(default=0, db_default=0)
    # Other claims refused (the previous attempt unknown, blocked, the gate, recovery): counted,
    # and only the first of each reason per attempt written to the history.
    claims_refused = models.PositiveBigIntegerField(default=0, db_default=0)
    # Held back by the dead-man gate (irreversible work while sweeper/reconciler are stale).
    gated_at = models.DateTimeField(null=True, blank=True)
    # A retryable failure's next attempt waits until then (the action's backoff, or its provider's
    # open circuit): the sweeper dispatches it when the time comes (ledger.services.sweeper).
    retry_at = models.DateTimeField(null=True, blank=True)
    # The operator who said "I'm on it" and since when (`ledger.services.ownership`); "" when nobody.
    holder = models.CharField(max_length=150, blank=True, default="", db_default="")
    held_since = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())

    objects = JobQuerySet.as_manager()

    class Meta:
        constraints = [
            models.CheckConstraint(condition=_one_of("status", JobStatus), name="job_status_valid"),
            models.CheckConstraint(condition=Q(lease_seq__gte=0), name="job_lease_seq_nonnegative"),
        ]
        indexes = [
            models.Index(fields=["status", "created_at"], name="job_status_created"),
            # The unknown-work queue, oldest first, keyset-paginated: bounded by the queue, not the history.
            models.Index(
                fields=["created_at", "id"],
                name="job_unknown_work_queue",
                condition=Q(status__in=[s.value for s in UNKNOWN_WORK]),
            ),
            models.Index(fields=["gated_at"], name="job_gated", condition=Q(gated_at__isnull=False)),
            models.Index(fields=["retry_at"], name="job_retry_at", condition=Q(retry_at__isnull=False)),
            # A scoped claim's candidates (ledger.stepsql.CLAIMABLE), oldest first for each tenant,
            # action, or both, so that a claim never walks the older jobs of another tenant or action.
            # Only claimable jobs are in them: a job enters when enqueued (or pending again) and
            # leaves when claimed.
            *(models.Index(fields=[*key, "created_at", "id"], name="job_claimable_" + "_".join(key),
                           condition=CLAIMABLE)
              for key in (["tenant"], ["action"], ["tenant", "action"])),
            # The reconciler's due-job selection, and nothing else.
            models.Index(
                fields=["next_check_at"],
                name="job_reconcile_due",
                condition=Q(status=JobStatus.NEEDS_RECONCILIATION) | Q(recovery_pending=True),
            ),
            # The console's search: a case-insensitive prefix of a job id or a key (`__istartswith`
            # is UPPER(col::text) LIKE 'X%', which these serve). Every job update writes an entry
            # into each: the price is measured in the README.
            models.Index(OpClass(Upper("job_id"), name="text_pattern_ops"), name="job_search_job_id"),
            models.Index(OpClass(Upper("idempotency_key"), name="text_pattern_ops"), name="job_search_key"),
        ]

    def __str__(self) -> str:
        return self.job_id


class Attempt(models.Model):
    # No index of its own: attempt_number_unique_per_job (job, number) serves lookups by job.
    job = models.ForeignKey(Job, on_delete=models.PROTECT, related_name="attempts", db_index=False)
    number = models.PositiveIntegerField()
    delivery_state = models.CharField(max_length=16, choices=Delivery.choices, default=Delivery.QUEUED)
    execution_state = models.CharField(
        max_length=16, choices=Execution.choices, default=Execution.NOT_STARTED
    )
    side_effect_state = models.CharField(
        max_length=16, choices=SideEffect.choices, default=SideEffect.NOT_ATTEMPTED
    )
    lease_owner = models.CharField(max_length=200, blank=True, default="")
    lease_token = models.BigIntegerField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    observed_identity = models.JSONField(null=True, blank=True)
    # Where the side effect was sent (the provider's endpoint or account, as the worker saw it;
    # ledger.endpoints), recorded when it began: a reconciler that asks elsewhere proves nothing.
    sent_to = models.CharField(max_length=500, blank=True, default="", db_default="")
    result_ref = models.CharField(max_length=500, blank=True, default="")
    error = models.TextField(blank=True, default="")
    version = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())

    objects = AttemptQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["job", "number"], name="attempt_number_unique_per_job"),
            models.UniqueConstraint(
                fields=["job"],
                condition=_one_of("execution_state", LIVE_EXECUTION),
                name="attempt_one_live_per_job",
            ),
            models.CheckConstraint(
                condition=_one_of("delivery_state", Delivery), name="attempt_delivery_valid"
            ),
            models.CheckConstraint(
                condition=_one_of("execution_state", Execution), name="attempt_execution_valid"
            ),
            models.CheckConstraint(
                condition=_one_of("side_effect_state", SideEffect), name="attempt_side_effect_valid"
            ),
            *[
                models.CheckConstraint(
                    condition=~Q(execution_state=execution)
                    | (
                        _one_of("side_effect_state", side_effects)
                        & (_one_of("delivery_state", deliveries) if deliveries else Q())
                    ),
                    name=f"attempt_{execution.value}_consistent",
                )
                for execution, (deliveries, side_effects) in CONSISTENCY.items()
            ],
            # A running attempt always has a complete lease: owner, fencing token, expiry.
            models.CheckConstraint(
                condition=~Q(execution_state=Execution.RUNNING)
                | (~Q(lease_owner="") & Q(lease_token__isnull=False) & Q(lease_expires_at__isnull=False)),
                name="attempt_running_has_lease",
            ),
            models.CheckConstraint(condition=Q(number__gte=1), name="attempt_number_positive"),
        ]
        indexes = [
            # The sweeper's selection: running attempts by lease expiry, nothing else.
            models.Index(
                fields=["lease_expires_at"],
                name="attempt_running_expiry",
                condition=Q(execution_state=Execution.RUNNING),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.job_id}#{self.number}"

    @property
    def states(self) -> dict[str, str]:
        return {
            "delivery": self.delivery_state,
            "execution": self.execution_state,
            "side_effect": self.side_effect_state,
        }


# sha256 over the previous hash and every field of the event, as PostgreSQL renders them (jsonb's
# text form is canonical; the time as epoch seconds, independent of the session's time zone).
CHAIN_HASH = (
    "encode(sha256(convert_to(concat_ws(chr(31), {row}.prev_hash, {row}.job_id::text, "
    "coalesce({row}.attempt_id::text, ''), extract(epoch from {row}.at)::text, {row}.actor_type, {row}.actor, "
    "{row}.kind, {row}.\"before\"::text, {row}.\"after\"::text, {row}.note, {row}.evidence::text), 'UTF8')), 'hex')"
)


class LedgerEvent(models.Model):
    """One row per state change, refusal, or decision. Never updated, never deleted."""

    # Indexed by event_job_id (job, id) and event_attempt_id (attempt, id), not on their own.
    job = models.ForeignKey(Job, on_delete=models.PROTECT, related_name="events", db_index=False)
    attempt = models.ForeignKey(
        Attempt, on_delete=models.PROTECT, null=True, blank=True, related_name="events", db_index=False
    )
    at = models.DateTimeField(db_default=Now())
    actor_type = models.CharField(max_length=16, choices=ActorType.choices)
    actor = models.CharField(max_length=200)
    kind = models.CharField(max_length=64, choices=EventKind.choices)
    before = models.JSONField(default=dict, blank=True)
    after = models.JSONField(default=dict, blank=True)
    note = models.TextField(blank=True, default="")
    evidence = models.JSONField(default=dict, blank=True)
    # The job's hash chain, computed by the database on insert (see CHAIN_HASH): tamper-evident.
    prev_hash = models.CharField(max_length=64, blank=True, default="")
    hash = models.CharField(max_length=64, blank=True, default="")

    class Meta:
        constraints = [
            models.CheckConstraint(condition=_one_of("actor_type", ActorType), name="event_actor_type_valid"),
            models.CheckConstraint(condition=_one_of("kind", EventKind), name="event_kind_valid"),
        ]
        indexes = [
            models.Index(fields=["job", "id"], name="event_job_id"),
            models.Index(fields=["attempt", "id"], name="event_attempt_id"),
            models.Index(fields=["kind", "at"], name="event_kind_at"),
            models.Index(fields=["actor", "id"], name="event_actor_id"),
            models.Index(fields=["at"], name="event_at"),
        ]
        # The hash chain is computed by a plain BEFORE INSERT trigger installed by migration 0006
        # (reckon_hash_chain, with CHAIN_HASH): pgtrigger's per-row ignore check raised and caught
        # an error inside a subtransaction on every insert, which cost more than the event itself.
        triggers = [
            pgtrigger.Protect(name="append_only", operation=pgtrigger.Update | pgtrigger.Delete),
        ]

    def __str__(self) -> str:
        return f"{self.kind} on {self.job_id}"


class PassRecord(models.Model):
    """When a background loop (the lease sweeper, the reconciler) last completed a pass."""

    name = models.CharField(max_length=32, primary_key=True)
    completed_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.name} at {self.completed_at}"


class LoopBeat(models.Model):
    """A running `--loop` process (the reconciler's, the sweeper's) on one host: when it last
    completed a pass. Written by the loop itself (ledger.loops), removed when it stops cleanly, so a
    row that stops beating is a process stopped, stuck or killed: the stalled-loop alert reads it.
    PassRecord cannot tell: any process's pass (the qcluster's once a minute) renews it."""

    name = models.CharField(max_length=300, primary_key=True)  # "reconciler@host"
    loop = models.CharField(max_length=32)  # "reconciler", "sweeper"
    process = models.CharField(max_length=200)  # host:pid of the process beating now
    interval_s = models.FloatField()
    started_at = models.DateTimeField()
    beat_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.name} at {self.beat_at}"


class JobSearchText(models.Model):
    """What the console's search reads of a job: its id, key and payload as one text, kept by a
    database trigger (migration 0016) when a job is inserted or those columns change. A table of
    its own because a job's row is updated at every step of its work, and each such update (not
    HOT: the status is indexed) would add a trigram of the whole text to an index on the job
    table; this row is written once per job (the bench measures the difference)."""

    job = models.OneToOneField(Job, on_delete=models.CASCADE, primary_key=True, related_name="search_text")
    tenant = models.CharField(max_length=100)
    text = models.TextField()

    class Meta:
        indexes = [GinIndex(fields=["text"], opclasses=["gin_trgm_ops"], name="job_search_text")]

    def __str__(self) -> str:
        return f"search text of job {self.job_id}"


class HistoryCheckpoint(models.Model):
    """An event partition that left the database (issue 28): what it held, where it went, and the
    hashes that let the archive file and the history still online be verified. Kept forever."""

    partition = models.CharField(max_length=63, unique=True)
    range_start = models.DateTimeField()
    range_end = models.DateTimeField()
    events = models.BigIntegerField()
    jobs = models.BigIntegerField()
    first_event_id = models.BigIntegerField(null=True)
    last_event_id = models.BigIntegerField(null=True)
    first_hash = models.CharField(max_length=64, blank=True, default="")
    last_hash = models.CharField(max_length=64, blank=True, default="")
    # {job pk: the last archived hash of its chain} for each job whose history goes on online:
    # the prev_hash its first online event must carry (what `ledger_check` starts from).
    carried = models.JSONField(default=dict)
    archive_file = models.CharField(max_length=500)
    archive_sha256 = models.CharField(max_length=64)
    archived_at = models.DateTimeField()

    class Meta:
        ordering = ["range_start"]
        triggers = [pgtrigger.Protect(name="append_only", operation=pgtrigger.Update | pgtrigger.Delete)]

    def __str__(self) -> str:
        return f"{self.partition} ({self.range_start:%Y-%m-%d} to {self.range_end:%Y-%m-%d})"


class JobTombstone(models.Model):
    """A job whose whole history was archived: what the idempotency guarantee still needs (its key
    is never run again) and where its history went."""

    job_id = models.CharField(max_length=200, primary_key=True)
    idempotency_key = models.CharField(max_length=320, unique=True)
    tenant = models.CharField(max_length=100)
    action = models.CharField(max_length=100)
    status = models.CharField(max_length=24)
    created_at = models.DateTimeField()
    finished_at = models.DateTimeField()
    checkpoint = models.ForeignKey(HistoryCheckpoint, on_delete=models.PROTECT, related_name="tombstones")

    class Meta:
        triggers = [pgtrigger.Protect(name="append_only", operation=pgtrigger.Update | pgtrigger.Delete)]

    def __str__(self) -> str:
        return f"{self.job_id} ({self.status}, archived)"


class RecoveryWindow(models.Model):
    """A time after the ledger lost history (a detected rollback, or `recover` after a restore)
    during which a key the ledger has never seen may be one it forgot: every new job is held
    until its provider has been asked (ledger.recovery_window: the job table's trigger)."""

    cause = models.CharField(max_length=32)  # "rollback_detected" or "recover"
    opened_by = models.CharField(max_length=200)
    opened_at = models.DateTimeField(db_default=Now())
    ends_at = models.DateTimeField()
    evidence = models.JSONField(default=dict, blank=True)  # what was compared, what was held
    ended_at = models.DateTimeField(null=True, blank=True)  # ended early by a person
    ended_by = models.CharField(max_length=150, blank=True, default="")
    end_note = models.TextField(blank=True, default="")

    class Meta:
        indexes = [models.Index(fields=["ends_at"], name="recovery_window_open",
                                condition=Q(ended_at__isnull=True))]

    def __str__(self) -> str:
        return f"recovery window {self.pk} ({self.cause}) until {self.ends_at}"
