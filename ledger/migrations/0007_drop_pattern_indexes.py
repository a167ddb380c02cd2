"""Drop the varchar_pattern_ops copies Django makes of the unique job_id and idempotency_key.

They serve only LIKE 'prefix%' searches, which no page or worker runs, yet every job update
that changes its status (claim, result, reconciliation) wrote an entry into each of them.
Equality lookups keep using the unique indexes. (Django drops these with IF EXISTS should the
fields ever change, so nothing later depends on them.)
"""

from django.db import migrations

PATTERN_INDEXES = {
    "ledger_job_job_id_b147f69f_like": "job_id",
    "ledger_job_idempotency_key_8c916a90_like": "idempotency_key",
}


class Migration(migrations.Migration):

    dependencies = [
        ("ledger", "0006_lean_event_insert"),
    ]

    operations = [
        migrations.RunSQL(
            [f"DROP INDEX IF EXISTS {name}" for name in PATTERN_INDEXES],
            [f"CREATE INDEX {name} ON ledger_job ({column} varchar_pattern_ops)"
             for name, column in PATTERN_INDEXES.items()],
        ),
    ]
