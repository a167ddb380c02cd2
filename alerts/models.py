"""What the watch loop keeps: the levels it samples (drawn by the overview's charts) and, per
alert condition, whether it is firing (so each condition notifies once until it clears)."""

import pgtrigger
from django.db import models
from django.db.models import Q
from django.db.models.functions import Now


class LevelSample(models.Model):
    """The unknown-work levels at one moment, for the whole ledger (every tenant). Levels are
    not in the event history cheaply, so a schedule samples them (alerts.sampling)."""

    sampled_at = models.DateTimeField(db_default=Now(), db_index=True)
    unknown_work = models.PositiveIntegerField()
    waiting_for_human = models.PositiveIntegerField()
    oldest_unknown_age_s = models.FloatField(null=True, blank=True)  # None: no unknown work
    # tenant -> {status: jobs} for the finished statuses: the bulk of a large history, counted
    # here once a minute rather than on every view of the overview.
    finished_jobs = models.JSONField(default=dict)

    def __str__(self) -> str:
        return f"{self.unknown_work} unknown at {self.sampled_at:%Y-%m-%d %H:%M}"


class EventCount(models.Model):
    """Ledger events of the kinds the overview charts, counted per hour and tenant by the sampling
    schedule (alerts.sampling.count_events): the charts read a few hundred of these rows instead
    of counting a week of a large history on every page view."""

    hour = models.DateTimeField()
    kind = models.CharField(max_length=64)
    tenant = models.CharField(max_length=100)
    count = models.PositiveIntegerField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["hour", "kind", "tenant"], name="eventcount_hour_kind_tenant")]

    def __str__(self) -> str:
        return f"{self.count} {self.kind} for {self.tenant} at {self.hour:%Y-%m-%d %H:00}"


class AlertCondition(models.TextChoices):
    UNKNOWN_TOO_OLD = "unknown_too_old"
    APPROVAL_WAITING = "approval_waiting"
    GATE_CLOSED = "gate_closed"
    RECONCILIATION_CONFLICT = "reconciliation_conflict"
    BREAK_GLASS_GUESSING = "break_glass_guessing"
    LEDGER_RECOVERY = "ledger_recovery"
    LOOP_STALLED = "loop_stalled"


class AlertState(models.Model):
    """One row per condition. Evaluation locks the row (SELECT ... FOR UPDATE), so of several
    hosts evaluating at once, exactly one sees the change and notifies.

    `firing` is what the last evaluation found (recorded with or without a channel: the console's
    alerts page shows it); `told_firing` is what the channels were last told. A message is due
    while the two differ and no silence runs; one no channel took stays due for the next pass."""

    condition = models.CharField(max_length=40, choices=AlertCondition.choices, unique=True)
    firing = models.BooleanField(default=False)
    summary = models.TextField(blank=True, default="")  # what the evaluation found when it last changed
    changed_at = models.DateTimeField(db_default=Now())  # firing since / clear since
    told_firing = models.BooleanField(default=False)
    notified_at = models.DateTimeField(null=True, blank=True)
    # A silence belongs to the incident it was set for: it ends when the alert resolves, or at its
    # time, whichever comes first (alerts.evaluate), and every message names it until then.
    silenced_until = models.DateTimeField(null=True, blank=True)
    silenced_by = models.CharField(max_length=150, blank=True, default="")
    silence_note = models.TextField(blank=True, default="")
    acknowledged_by = models.CharField(max_length=150, blank=True, default="")  # cleared when it resolves
    acknowledged_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(condition__in=[c.value for c in AlertCondition]), name="alert_condition_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.condition}: {'firing' if self.firing else 'clear'}"


class AlertEventKind(models.TextChoices):
    FIRED = "fired"
    RESOLVED = "resolved"
    ACKNOWLEDGED = "acknowledged"
    SILENCED = "silenced"
    SILENCE_ENDED = "silence_ended"


class AlertEvent(models.Model):
    """The alerts' history: each change the evaluation found, and who acknowledged or silenced
    what, when and why. Append-only, as the ledger's history is (a trigger refuses UPDATE and
    DELETE)."""

    condition = models.CharField(max_length=40, choices=AlertCondition.choices)
    kind = models.CharField(max_length=20, choices=AlertEventKind.choices)
    at = models.DateTimeField(db_default=Now(), db_index=True)
    actor = models.CharField(max_length=150)  # a username, or "reckon" for the evaluation
    note = models.TextField(blank=True, default="")
    silenced_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(condition__in=[c.value for c in AlertCondition]), name="alertevent_condition_valid"
            ),
            models.CheckConstraint(
                condition=Q(kind__in=[k.value for k in AlertEventKind]), name="alertevent_kind_valid"
            ),
        ]
        triggers = [pgtrigger.Protect(name="append_only", operation=pgtrigger.Update | pgtrigger.Delete)]

    def __str__(self) -> str:
        return f"{self.condition} {self.kind} by {self.actor} at {self.at:%Y-%m-%d %H:%M}"
