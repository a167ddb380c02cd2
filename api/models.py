"""WorkerToken: a bearer credential for the HTTP worker API, scoped to tenants and actions.

Only the SHA-256 of a token is stored; the token itself is shown once, when it is created.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from ledger.actions import is_gateway_action, registered_actions

ALL = "*"


class WorkerTokenQuerySet(models.QuerySet):
    def active(self) -> WorkerTokenQuerySet:
        return self.filter(revoked_at__isnull=True)


class WorkerToken(models.Model):
    name = models.CharField(max_length=100)
    # Unique: the prefix names the token in the history, and binds each lease to the token that
    # claimed it (see `api.tokens.holder_name`).
    prefix = models.CharField(max_length=16, unique=True, help_text="The token's first characters, for display.")
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    tenants = models.JSONField(default=list, help_text='Tenants this token may act for; "*" for all.')
    actions = models.JSONField(default=list, help_text='Actions this token may run; "*" for all.')
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Who issued it, as text that outlives the account: "alice (admin)", "cli (os user root)".
    issued_by = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(db_default=Now())
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    # Refused pull answers are counted here, not written to the history one event each.
    answers_refused = models.PositiveBigIntegerField(default=0, db_default=0)

    objects = WorkerTokenQuerySet.as_manager()

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(token_hash__regex=r"^[0-9a-f]{64}$"), name="worker_token_hash_hex"  # nosec B106  # a hex-format CHECK on the stored token hash, not a password
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None

    def allows(self, *, tenant: str, action: str) -> bool:
        """Whether the token's scope covers the tenant and action (the MCP gateway asks this of its agents)."""
        return (ALL in self.tenants or tenant in self.tenants) and (
            ALL in self.actions or action in self.actions
        )

    def reaches(self, *, tenant: str, action: str) -> bool:
        """Whether the worker API lets this token see and step on jobs of the tenant and action: as
        `allows`, except that a "*" does not reach the MCP gateway's tool calls (`mcp:` actions),
        whose jobs only the gateway runs; a token reaches one only by naming its action."""
        return (ALL in self.tenants or tenant in self.tenants) and self.reaches_action(action)

    def reaches_action(self, action: str) -> bool:
        return action in self.actions or (ALL in self.actions and not is_gateway_action(action))

    def actions_reached(self) -> list[str]:
        """The actions `reaches` covers, by name: a "*" is every declared action but the gateway's."""
        if ALL not in self.actions:
            return list(self.actions)
        return [action.name for action in registered_actions() if not is_gateway_action(action.name)]


class EnqueueKey(models.Model):
    """An `Idempotency-Key` a token sent with an enqueue (api/enqueue_keys.py): the request it was
    first sent with (a digest) and the job that request made. Written in the enqueue's transaction."""

    token = models.ForeignKey(WorkerToken, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=255)
    request_digest = models.CharField(max_length=64)
    job_id = models.TextField()
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [models.UniqueConstraint(fields=["token", "key"], name="enqueue_key_per_token")]

    def __str__(self) -> str:
        return f"{self.key} -> {self.job_id}"
