"""ReconciliationCheck: one row per look at the outside world, whatever it found."""

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now


class CheckOutcome(models.TextChoices):
    """What one look at the provider found."""

    CONFIRMED = "confirmed"
    NOT_FOUND = "not_found"
    CONFLICT = "conflict"
    UNAVAILABLE = "unavailable"


class ReconciliationCheck(models.Model):
    job = models.ForeignKey("ledger.Job", on_delete=models.PROTECT, related_name="checks")
    attempt = models.ForeignKey("ledger.Attempt", on_delete=models.PROTECT, related_name="checks")
    reconciler = models.CharField(max_length=200)
    # Where the reconciler asked (the provider's endpoint or account, compared with the attempt's
    # sent_to); "": it did not say.
    asked = models.CharField(max_length=500, blank=True, default="")
    outcome = models.CharField(max_length=16, choices=CheckOutcome.choices)
    evidence = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True, default="")
    duration_ms = models.PositiveIntegerField(default=0)
    checked_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(outcome__in=[o.value for o in CheckOutcome]), name="check_outcome_valid"
            ),
        ]
        indexes = [models.Index(fields=["job", "id"], name="check_job_id")]

    def __str__(self) -> str:
        return f"{self.outcome} for {self.job_id} by {self.reconciler}"


class ProviderState(models.Model):
    """What one process's budget says of one provider (ledger.budget), published for the console
    (reconciliation.providers). Each process writes only its own rows."""

    class State(models.TextChoices):
        OK = "ok"
        THROTTLED = "throttled"
        OPEN = "open"
        FAILING = "failing"  # the circuit is closed, but most of the last minute's calls failed

    provider = models.CharField(max_length=200)
    process = models.CharField(max_length=200)  # host:pid
    state = models.CharField(max_length=16, choices=State.choices)
    rate = models.FloatField(null=True, blank=True)  # requests/s this process keeps to; null: unpaced
    open_until = models.DateTimeField(null=True, blank=True)
    throttled = models.PositiveBigIntegerField(default=0)  # 429s answered to this process so far
    reason = models.CharField(max_length=200, blank=True, default="")
    # Turns this process took at the provider in the minute before updated_at (its recent rate).
    calls_last_minute = models.PositiveIntegerField(default=0, db_default=0)
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["provider", "process"], name="provider_state_one_per_process"),
            models.CheckConstraint(condition=Q(state__in=["ok", "throttled", "open", "failing"]),
                                   name="provider_state_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.provider} {self.state} in {self.process}"
