"""Who may see which tenants in the console, and the trail of changes made in /admin/."""

from __future__ import annotations

import pgtrigger
from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models.functions import Now


class TenantScope(models.Model):
    """The tenants a console user may see and decide on. No scope, or an empty one: nothing.

    Superusers see every tenant whatever their scope says."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="tenant_scope")
    all_tenants = models.BooleanField(default=False, help_text="Every tenant, present and future.")
    tenants = ArrayField(
        models.CharField(max_length=100),
        default=list,
        blank=True,
        help_text="Comma-separated tenant names (ignored when all tenants is set).",
    )

    def __str__(self) -> str:
        return f"{self.user}: {self.describe()}"

    def describe(self) -> str:
        if self.all_tenants:
            return "all tenants"
        return ", ".join(sorted(self.tenants)) or "no tenants"

    def save(self, *args, **kwargs):
        self.tenants = sorted({tenant.strip() for tenant in self.tenants if tenant.strip()})
        super().save(*args, **kwargs)


class AdminAuditEntry(models.Model):
    """One change made in /admin/ (a user, a group, a tenant scope, a worker token, a login attempt).
    Never updated, never deleted.

    The actor and the object are copied as text, not linked: the trail outlives the accounts it
    names (a deleted user's changes stay on record), and a foreign key's ON DELETE would have to
    update this table."""

    ADDED, CHANGED, DELETED = "added", "changed", "deleted"

    at = models.DateTimeField(db_default=Now())
    actor = models.CharField(max_length=150)
    actor_pk = models.BigIntegerField(null=True)
    action = models.CharField(
        max_length=8, choices=[(ADDED, "added"), (CHANGED, "changed"), (DELETED, "deleted")]
    )
    object_type = models.CharField(max_length=100, help_text='app_label.model, e.g. "auth.user"')
    object_pk = models.CharField(max_length=100)
    object_repr = models.CharField(max_length=200)
    # {field: {"before": …, "after": …}}; a secret (the password hash) only as {"secret": true}.
    changes = models.JSONField(default=dict)

    class Meta:
        verbose_name_plural = "admin audit entries"
        triggers = [
            pgtrigger.Protect(name="append_only", operation=pgtrigger.Update | pgtrigger.Delete),
        ]

    def __str__(self) -> str:
        return f"{self.actor} {self.action} {self.object_type} {self.object_repr}"


class BulkRun(models.Model):
    """One decision applied to every job a queue filter matches, batch by batch (`console.bulk_runs`).

    The run remembers the filter, not a list of jobs: each batch takes the next jobs the filter
    matches after `cursor`, in the queue's order. A job whose latest attempt changed after the
    run was confirmed (`created_at`) is left alone: the person confirmed what they saw."""

    # Progress of a piece of work, not history (each decision is an event in the ledger): it goes with its author.
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="bulk_runs")
    decision = models.CharField(max_length=32)
    note = models.TextField()
    # What the person saw, for a decision that takes evidence (confirm, not found); "" for the others.
    evidence = models.TextField(blank=True, default="")
    # The queue filter's fields (console.forms.QueueFilterForm), as its form posted them.
    filters = models.JSONField(default=dict)
    total = models.PositiveIntegerField(help_text="Jobs the filter matched when the run was confirmed.")
    done = models.PositiveIntegerField(default=0)
    succeeded = models.PositiveIntegerField(default=0)
    refused = models.PositiveIntegerField(default=0)
    cursor = models.CharField(max_length=64, blank=True, default="")
    # The first refusals, each [job_id, reason]: what the person must look at.
    refusals = models.JSONField(default=list)
    created_at = models.DateTimeField(db_default=Now())
    finished_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"bulk run {self.pk}: {self.decision} on {self.total} jobs"

    @property
    def finished(self) -> bool:
        return self.finished_at is not None


# The sign-in trail (written by sso/trail.py): every sign-in, sign-out, failed sign-in and
# break-glass use. Never updated, never deleted; shown on /audit/ to those who see every tenant.
class SignInEvent(models.Model):
    SIGNED_IN, SIGNED_OUT, FAILED, BREAK_GLASS = "signed_in", "signed_out", "failed", "break_glass"
    KINDS = [(SIGNED_IN, "signed in"), (SIGNED_OUT, "signed out"), (FAILED, "sign-in failed"),
             (BREAK_GLASS, "break-glass sign-in")]

    at = models.DateTimeField(db_default=Now())
    kind = models.CharField(max_length=16, choices=KINDS)
    # Copied as text, not linked: the trail outlives the accounts it names.
    username = models.CharField(max_length=150, blank=True, default="")
    user_pk = models.BigIntegerField(null=True)
    # "password", or the identity provider's id; with the provider's issuer and subject.
    method = models.CharField(max_length=100)
    issuer = models.CharField(max_length=300, blank=True, default="")
    subject = models.CharField(max_length=300, blank=True, default="")
    address = models.GenericIPAddressField(null=True)
    detail = models.TextField(blank=True, default="")

    class Meta:
        triggers = [pgtrigger.Protect(name="append_only", operation=pgtrigger.Update | pgtrigger.Delete)]
        constraints = [models.CheckConstraint(condition=models.Q(kind__in=["signed_in", "signed_out", "failed",
                                                                          "break_glass"]),
                                              name="sign_in_event_kind_valid")]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.kind} {self.username or '?'} via {self.method}"
