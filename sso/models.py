"""What the break-glass second factor keeps in PostgreSQL, so that every web process sees it: the
code failures per account (the lock-out and its growing wait) and the TOTP time steps already used
(the unique constraint makes "a code works once" hold across processes and hosts)."""

from django.conf import settings
from django.db import models
from django.db.models.functions import Now


class CodeFailures(models.Model):
    """One row per break-glass account: wrong codes since its last good one, across sessions."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="code_failures")
    failures = models.PositiveIntegerField(default=0)
    latest_at = models.DateTimeField(db_default=Now())

    def __str__(self) -> str:
        return f"{self.failures} wrong codes for user {self.user_id}"


class UsedCode(models.Model):
    """A TOTP code accepted once: the account and the code's time step (unix time // period)."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    time_step = models.BigIntegerField()
    used_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "time_step"], name="used_code_once")]

    def __str__(self) -> str:
        return f"step {self.time_step} of user {self.user_id}"
