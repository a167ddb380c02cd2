"""ApprovalRequest: a second person's yes before an irreversible action is replayed.

Four eyes is a database rule (decided_by <> requested_by, and nobody the job's history excludes:
the `approval_four_eyes_history` trigger), not only a view rule, and a job has at most one
pending request (a partial unique index).
"""

import pgtrigger
from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Now

from approvals.identities import ACCOUNT


class ApprovalStatus(models.TextChoices):
    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    EXPIRED = "expired"
    WITHDRAWN = "withdrawn"


# The decider is none of the accounts and identities this request recorded as excluded by the job's
# history (approvals.foureyes) when it was opened and decided, nor of those an earlier request of
# the same job asked for or recorded: an "ask again" after an expiry starts from that history.
FOUR_EYES_HISTORY = """
IF NEW.decided_by_id IS NOT NULL AND (
    '{ACCOUNT}' || NEW.decided_by_id = ANY(NEW.excluded_identities)
    OR NEW.decided_by_identities && NEW.excluded_identities
    OR EXISTS (
        SELECT 1 FROM approvals_approvalrequest earlier
        WHERE earlier.job_id = NEW.job_id AND earlier.id <> NEW.id AND (
            earlier.requested_by_id = NEW.decided_by_id
            OR '{ACCOUNT}' || NEW.decided_by_id = ANY(earlier.requested_by_identities || earlier.excluded_identities)
            OR NEW.decided_by_identities && (earlier.requested_by_identities || earlier.excluded_identities)))
) THEN
    RAISE EXCEPTION 'approval_four_eyes_history: the history of job row % excludes account % from deciding it',
        NEW.job_id, NEW.decided_by_id USING ERRCODE = 'check_violation';
END IF;
RETURN NULL;
""".replace("{ACCOUNT}", ACCOUNT)  # nosec B608  # a trigger body; ACCOUNT is our own constant, no input


class ApprovalRequest(models.Model):
    job = models.ForeignKey("ledger.Job", on_delete=models.PROTECT, related_name="approval_requests")
    attempt = models.ForeignKey("ledger.Attempt", on_delete=models.PROTECT, related_name="approval_requests")
    # Null when the reconciler asked (nobody to exclude); the actor is in `requested_by_actor`.
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    requested_by_actor = models.CharField(max_length=200)
    reason = models.TextField()
    status = models.CharField(max_length=16, choices=ApprovalStatus.choices, default=ApprovalStatus.PENDING)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    # Who the two people are behind their accounts (approvals.identities): the local account and every
    # identity-provider subject linked to it. Four eyes holds on these too: one subject linked to
    # two accounts is one person.
    requested_by_identities = ArrayField(models.CharField(max_length=400), default=list, db_default=[], blank=True)
    decided_by_identities = ArrayField(models.CharField(max_length=400), default=list, db_default=[], blank=True)
    # Everyone the job's whole history excludes from deciding (approvals.foureyes), as accounts and
    # identities: recorded when the request is opened, widened when it is decided.
    excluded_identities = ArrayField(models.CharField(max_length=400), default=list, db_default=[], blank=True)
    decision_note = models.TextField(blank=True, default="")
    expires_at = models.DateTimeField()
    created_at = models.DateTimeField(db_default=Now())
    # SHA-256 of the canonical JSON of the job payload the approval is granted for.
    payload_digest = models.CharField(max_length=64)
    evidence = models.JSONField(default=dict, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=[s.value for s in ApprovalStatus]), name="approval_status_valid"
            ),
            models.CheckConstraint(
                condition=Q(decided_by__isnull=True)
                | Q(requested_by__isnull=True)
                | ~Q(decided_by=F("requested_by")),
                name="approval_four_eyes",
            ),
            models.CheckConstraint(
                condition=~Q(decided_by_identities__overlap=F("requested_by_identities")),
                name="approval_four_eyes_identities",
            ),
            models.CheckConstraint(
                condition=Q(status=ApprovalStatus.PENDING) | Q(decided_at__isnull=False),
                name="approval_decided_has_time",
            ),
            models.CheckConstraint(
                condition=~Q(status__in=[ApprovalStatus.APPROVED, ApprovalStatus.REJECTED])
                | Q(decided_by__isnull=False),
                name="approval_decided_has_decider",
            ),
            models.UniqueConstraint(
                fields=["job"],
                condition=Q(status=ApprovalStatus.PENDING),
                name="approval_one_pending_per_job",
            ),
        ]
        indexes = [models.Index(fields=["status", "expires_at"], name="approval_status_expiry")]
        triggers = [
            # After the row's CHECK constraints, which name the requester's account or identity first.
            pgtrigger.Trigger(name="approval_four_eyes_history", when=pgtrigger.After,
                              operation=pgtrigger.Insert | pgtrigger.Update, func=FOUR_EYES_HISTORY),
        ]

    def __str__(self) -> str:
        return f"approval {self.pk} for {self.job_id} ({self.status})"
