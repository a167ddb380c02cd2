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
