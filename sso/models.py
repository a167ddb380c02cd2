"""The sign-in trail: every sign-in, sign-out, failed sign-in and break-glass use. Never updated,
never deleted; shown on /audit/ to those who see every tenant."""

from __future__ import annotations

import pgtrigger
from django.db import models
from django.db.models.functions import Now


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
