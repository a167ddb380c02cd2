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


# The decider, or an account linked to theirs (AccountLink: one person), is none of the accounts and
# identities this request or another request of the same job asked for or recorded as excluded by
# the job's history (approvals.foureyes): an "ask again" after an expiry starts from that history.
# (The request's own requester is refused by the CHECK constraints first, with their own names.)
FOUR_EYES_HISTORY = """
IF NEW.decided_by_id IS NOT NULL AND EXISTS (
    SELECT 1
    FROM approvals_approvalrequest request,
         (SELECT NEW.decided_by_id AS id
          UNION SELECT twin.user_id FROM approvals_accountlink mine
                JOIN approvals_accountlink twin ON twin.person = mine.person
                WHERE mine.user_id = NEW.decided_by_id) decider
    WHERE request.job_id = NEW.job_id AND (
        request.requested_by_id = decider.id
        OR '{ACCOUNT}' || decider.id = ANY(request.requested_by_identities || request.excluded_identities)
        OR NEW.decided_by_identities && (request.requested_by_identities || request.excluded_identities))
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


class AccountLink(models.Model):
    """Accounts that are one person (a local account and its sign-in provider twin, `op_a` and
    `op_a@testidp`): four eyes treats them as one, in code (approvals.identities) and in the
    database (FOUR_EYES_HISTORY). Linked by an administrator (`manage.py link_accounts`); the
    accounts of one person share `person`. An account linked to nobody has no row."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="person_link")
    person = models.BigIntegerField(db_index=True, help_text="The same number for every account of one person.")
    linked_by = models.CharField(max_length=150)
    linked_at = models.DateTimeField(db_default=Now())

    def __str__(self) -> str:
        return f"account {self.user_id} is person {self.person}"


class FormerUsername(models.Model):
    """A name an account went by until a rename (written by a database trigger on the user table,
    whichever way the rename came: /admin/, a shell, SQL; installed on Django's auth_user by
    migration 0004). Events name people by username: this is
    how an event's actor is matched to the account that had the name then (approvals.identities)."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="former_usernames")
    username = models.CharField(max_length=150, db_index=True)
    until = models.DateTimeField()

    def __str__(self) -> str:
        return f"account {self.user_id} was {self.username} until {self.until:%Y-%m-%d %H:%M:%S}"

