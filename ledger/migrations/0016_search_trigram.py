"""The console's search inside ids, keys, markers, payloads and provider answers: pg_trgm.

Trigram GIN indexes serve `ILIKE '%fragment%'` anywhere in a text, in any case (full-text search
does not: it matches words from their start, and an id's end or an email's domain is no word).
pg_trgm ships with PostgreSQL's contrib and is a trusted extension (PostgreSQL 13+): the
database's owner, or any role with CREATE on the database, may create it; the embedded cluster
connects as its superuser. A deployment whose migrating role may not, has it created once by an
administrator (`CREATE EXTENSION pg_trgm;`); this migration then finds it there.

The expressions are repeated in console.selectors.search (a query uses an index only when it
spells the index's own expression; a test reads the plan). Written in SQL because an index needs
`||`, which is immutable, where Django's Concat renders CONCAT(), which is not.
"""

from django.db import migrations

JOB_TEXT = "(job_id || ' ' || idempotency_key || ' ' || payload::text)"
ANSWER_TEXT = "(result_ref || ' ' || error)"


class Migration(migrations.Migration):

    dependencies = [
        ('ledger', '0015_tokens_claims_refused'),
    ]

    operations = [
        migrations.RunSQL("CREATE EXTENSION IF NOT EXISTS pg_trgm", migrations.RunSQL.noop),
        migrations.RunSQL(
            f"CREATE INDEX job_search_text ON ledger_job USING gin ({JOB_TEXT} gin_trgm_ops)",
            "DROP INDEX IF EXISTS job_search_text",
        ),
        # Only attempts the provider answered (an id, an error): the others never carry an entry.
        migrations.RunSQL(
            f"CREATE INDEX attempt_search_answer ON ledger_attempt USING gin ({ANSWER_TEXT} gin_trgm_ops) "
            "WHERE result_ref <> '' OR error <> ''",
            "DROP INDEX IF EXISTS attempt_search_answer",
        ),
    ]
