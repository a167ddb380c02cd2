"""Jobs get a holder ("I'm on it"), its events, and the indexes of the console's job search."""

import django.contrib.postgres.indexes
import django.db.models.functions.text
from django.db import migrations, models

# The console's search (console.selectors.search): a case-insensitive prefix of a job id or key.
SEARCH_INDEXES = {"job_search_job_id": "job_id", "job_search_key": "idempotency_key"}


class Migration(migrations.Migration):

    dependencies = [
        ('ledger', '0012_operator_identity_recheck'),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name='ledgerevent',
            name='event_kind_valid',
        ),
        migrations.AddField(
            model_name='job',
            name='held_since',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='job',
            name='holder',
            field=models.CharField(blank=True, db_default='', default='', max_length=150),
        ),
        migrations.AlterField(
            model_name='ledgerevent',
            name='kind',
            field=models.CharField(choices=[('enqueued', 'Enqueued'), ('enqueue_repeated', 'Enqueue Repeated'), ('claimed', 'Claimed'), ('claim_refused', 'Claim Refused'), ('duplicate_delivery', 'Duplicate Delivery'), ('lease_renewed', 'Lease Renewed'), ('identity_verified', 'Identity Verified'), ('identity_mismatch', 'Identity Mismatch'), ('side_effect_started', 'Side Effect Started'), ('side_effect_held', 'Side Effect Held'), ('succeeded', 'Succeeded'), ('failed', 'Failed'), ('observation_lost', 'Observation Lost'), ('late_write_rejected', 'Late Write Rejected'), ('lease_expired_reclaimed', 'Lease Expired Reclaimed'), ('lease_expired_unknown', 'Lease Expired Unknown'), ('redispatched', 'Redispatched'), ('gate_released', 'Gate Released'), ('attempt_opened', 'Attempt Opened'), ('attempts_exhausted', 'Attempts Exhausted'), ('reconciled_confirmed', 'Reconciled Confirmed'), ('reconciled_not_found', 'Reconciled Not Found'), ('reconciled_conflict', 'Reconciled Conflict'), ('reconciliation_unavailable', 'Reconciliation Unavailable'), ('reconciliation_gave_up', 'Reconciliation Gave Up'), ('reconciliation_answer_refused', 'Reconciliation Answer Refused'), ('not_queryable', 'Not Queryable'), ('recovery_started', 'Recovery Started'), ('recovery_released', 'Recovery Released'), ('operator_confirmed_effect', 'Operator Confirmed Effect'), ('operator_marked_not_found', 'Operator Marked Not Found'), ('operator_escalated', 'Operator Escalated'), ('operator_retried_reconciliation', 'Operator Retried Reconciliation'), ('operator_cancelled', 'Operator Cancelled'), ('operator_rechecked_identity', 'Operator Rechecked Identity'), ('operator_replayed_blocked', 'Operator Replayed Blocked'), ('job_taken', 'Job Taken'), ('job_released', 'Job Released'), ('approval_requested', 'Approval Requested'), ('approval_granted', 'Approval Granted'), ('approval_rejected', 'Approval Rejected'), ('approval_withdrawn', 'Approval Withdrawn'), ('approval_expired', 'Approval Expired')], max_length=64),
        ),
        # Django 5.2 renders OpClass(Upper(...)) inside parentheses, which PostgreSQL refuses: the
        # SQL is written out; the state is the models' Meta.indexes.
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    f"CREATE INDEX {name} ON ledger_job ((UPPER({column}::text)) text_pattern_ops)",
                    f"DROP INDEX IF EXISTS {name}",
                )
                for name, column in SEARCH_INDEXES.items()
            ],
            state_operations=[
                migrations.AddIndex(
                    model_name='job',
                    index=models.Index(django.contrib.postgres.indexes.OpClass(django.db.models.functions.text.Upper('job_id'), name='text_pattern_ops'), name='job_search_job_id'),
                ),
                migrations.AddIndex(
                    model_name='job',
                    index=models.Index(django.contrib.postgres.indexes.OpClass(django.db.models.functions.text.Upper('idempotency_key'), name='text_pattern_ops'), name='job_search_key'),
                ),
            ],
        ),
        migrations.AddConstraint(
            model_name='ledgerevent',
            constraint=models.CheckConstraint(condition=models.Q(('kind__in', ['enqueued', 'enqueue_repeated', 'claimed', 'claim_refused', 'duplicate_delivery', 'lease_renewed', 'identity_verified', 'identity_mismatch', 'side_effect_started', 'side_effect_held', 'succeeded', 'failed', 'observation_lost', 'late_write_rejected', 'lease_expired_reclaimed', 'lease_expired_unknown', 'redispatched', 'gate_released', 'attempt_opened', 'attempts_exhausted', 'reconciled_confirmed', 'reconciled_not_found', 'reconciled_conflict', 'reconciliation_unavailable', 'reconciliation_gave_up', 'reconciliation_answer_refused', 'not_queryable', 'recovery_started', 'recovery_released', 'operator_confirmed_effect', 'operator_marked_not_found', 'operator_escalated', 'operator_retried_reconciliation', 'operator_cancelled', 'operator_rechecked_identity', 'operator_replayed_blocked', 'job_taken', 'job_released', 'approval_requested', 'approval_granted', 'approval_rejected', 'approval_withdrawn', 'approval_expired'])), name='event_kind_valid'),
        ),
    ]
