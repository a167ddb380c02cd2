"""The console's search inside ids, keys, markers, payloads and provider answers: pg_trgm.

Trigram GIN indexes serve `ILIKE '%fragment%'` anywhere in a text, in any case (full-text search
does not: it matches words from their start, and an id's end or an email's domain is no word).
pg_trgm ships with PostgreSQL's contrib and is a trusted extension (PostgreSQL 13+): the
database's owner, or any role with CREATE on the database, may create it; the embedded cluster
connects as its superuser. Where the migrating role may not, an administrator creates it once
(`CREATE EXTENSION pg_trgm;`) and this migration finds it there.

A job's text lives in ledger_jobsearchtext (JobSearchText), written by a trigger on insert and on
a change of the id, tenant, key or payload, so that the job's own updates (every step of its
work) write no trigram. The answers' index is partial: only attempts a provider answered.
The answers' expression is repeated in console.selectors.search (a query uses an index only when
it spells its expression; a test reads the plan), written in SQL because an index needs `||`,
which is immutable, where Django's Concat renders CONCAT(), which is not.
"""

import django.contrib.postgres.indexes
import django.db.models.deletion
from django.contrib.postgres.operations import TrigramExtension
from django.db import migrations, models

TRIGGER = """
CREATE FUNCTION reckon_job_search_text() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO ledger_jobsearchtext (job_id, tenant, text) VALUES (NEW.id, NEW.tenant,
        NEW.job_id || ' ' || NEW.idempotency_key || ' ' || NEW.payload::text)
    ON CONFLICT (job_id) DO UPDATE SET tenant = EXCLUDED.tenant, text = EXCLUDED.text;
    RETURN NULL;
END $$;
CREATE TRIGGER reckon_job_search_text_insert AFTER INSERT ON ledger_job
    FOR EACH ROW EXECUTE FUNCTION reckon_job_search_text();
CREATE TRIGGER reckon_job_search_text_update AFTER UPDATE OF job_id, tenant, idempotency_key, payload ON ledger_job
    FOR EACH ROW WHEN (OLD.job_id IS DISTINCT FROM NEW.job_id OR OLD.tenant IS DISTINCT FROM NEW.tenant
                       OR OLD.idempotency_key IS DISTINCT FROM NEW.idempotency_key
                       OR OLD.payload IS DISTINCT FROM NEW.payload)
    EXECUTE FUNCTION reckon_job_search_text();
INSERT INTO ledger_jobsearchtext (job_id, tenant, text)
    SELECT id, tenant, job_id || ' ' || idempotency_key || ' ' || payload::text FROM ledger_job;
"""
UNTRIGGER = """
DROP TRIGGER IF EXISTS reckon_job_search_text_update ON ledger_job;
DROP TRIGGER IF EXISTS reckon_job_search_text_insert ON ledger_job;
DROP FUNCTION IF EXISTS reckon_job_search_text();
"""
ANSWER_TEXT = "(result_ref || ' ' || error)"


class Migration(migrations.Migration):

    dependencies = [
        ('ledger', '0018_event_kinds_after_merge'),
    ]

    operations = [
        TrigramExtension(),
        migrations.CreateModel(
            name='JobSearchText',
            fields=[
                ('job', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, primary_key=True, related_name='search_text', serialize=False, to='ledger.job')),
                ('tenant', models.CharField(max_length=100)),
                ('text', models.TextField()),
            ],
            options={
                'indexes': [django.contrib.postgres.indexes.GinIndex(fields=['text'], opclasses=['gin_trgm_ops'], name='job_search_text')],
            },
        ),
        migrations.RunSQL(TRIGGER, UNTRIGGER),
        # Only attempts the provider answered (an id, an error): the others never carry an entry.
        migrations.RunSQL(
            f"CREATE INDEX attempt_search_answer ON ledger_attempt USING gin ({ANSWER_TEXT} gin_trgm_ops) "
            "WHERE result_ref <> '' OR error <> ''",
            "DROP INDEX IF EXISTS attempt_search_answer",
        ),
    ]
