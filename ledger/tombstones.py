"""An archived job's id is never run again: the rule as the database holds it, on every path that
creates a job (enqueue_job, the one-statement enqueue of ledger.fastpath, a bulk load, raw SQL).

A trigger on the job table refuses a job whose id or key has a tombstone (ledger.models.JobTombstone,
written by the retention pass as the job's rows leave). It runs AFTER the insert, not before: a pass
deletes the job's row and inserts its tombstone in one transaction, and an insert of the same id
waits on the job table's unique index until that commits; a BEFORE INSERT trigger has run by then,
on a snapshot without the tombstone, while an AFTER trigger's query, under READ COMMITTED (Reckon's
isolation; under REPEATABLE READ it would read the transaction's first snapshot), takes a snapshot
of its own after the wait and sees it (tests/ledger/test_tombstones.py races the two on real
connections). It raises SQLSTATE 23R01, in the integrity-constraint class
(psycopg and Django raise IntegrityError), which ledger.services.jobs turns into JobArchived.

Migrations freeze the text they install and never import this module: when its output changes,
tests/ledger/test_tombstones.py fails and names the migration to write.
"""

from __future__ import annotations

from ledger.models import Job, JobTombstone

SQLSTATE = "23R01"
FUNCTION = "reckon_job_not_archived"
# What a tombstone keeps of its job that no new job may share (each unique in both tables).
MATCHED_ON = ("job_id", "idempotency_key")

JOBS = Job._meta.db_table
TOMBSTONES = JobTombstone._meta.db_table


def _column(model, name: str) -> str:
    return model._meta.get_field(name).column


def matching(row: str) -> str:
    """The tombstones' condition for the job `row` (a row variable or a table alias)."""
    return " OR ".join(f"t.{_column(JobTombstone, name)} = {row}.{_column(Job, name)}" for name in MATCHED_ON)


def function_sql() -> str:
    return f"""
CREATE OR REPLACE FUNCTION {FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    archived {TOMBSTONES}%ROWTYPE;
BEGIN
    SELECT * INTO archived FROM {TOMBSTONES} t WHERE {matching("NEW")} LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'job % is archived (tombstone of job %, %, checkpoint %): a job id is never run again',
            NEW.job_id, archived.job_id, archived.status, archived.checkpoint_id
            USING ERRCODE = '{SQLSTATE}', CONSTRAINT = '{FUNCTION}';
    END IF;
    RETURN NULL;
END $$;
"""  # nosec B608  # SQL generated from the models' names, no input


def triggers_sql() -> list[str]:
    """On insert, and on a change of what the tombstones match (no writer changes either today)."""
    columns = [_column(Job, name) for name in MATCHED_ON]
    changed = " OR ".join(f"OLD.{column} IS DISTINCT FROM NEW.{column}" for column in columns)
    return [
        f"CREATE TRIGGER {FUNCTION}_insert AFTER INSERT ON {JOBS} FOR EACH ROW EXECUTE FUNCTION {FUNCTION}()",
        f"CREATE TRIGGER {FUNCTION}_update AFTER UPDATE OF {', '.join(columns)} ON {JOBS} FOR EACH ROW "
        f"WHEN ({changed}) EXECUTE FUNCTION {FUNCTION}()",
    ]


def install_sql() -> list[str]:
    """What a migration runs, in order."""
    return [function_sql(), *triggers_sql()]


# ledger_check's "a live job with a tombstone": one join per matched column, each on a unique index
# (an OR in one join would probe the tombstones once per job), one row per job (its id's match first).
def _matched_on(rank: int, name: str) -> str:
    return (f"SELECT j.{_column(Job, 'job_id')} AS job, {rank} AS rank, '{name}' AS matched, "  # nosec B608  # SQL generated from the models' names, no input
            f"t.job_id AS tombstone, t.status, t.checkpoint_id AS checkpoint "
            f"FROM {JOBS} j JOIN {TOMBSTONES} t ON t.{_column(JobTombstone, name)} = j.{_column(Job, name)}")


LIVE_WITH_TOMBSTONE_SQL = (
    "SELECT DISTINCT ON (m.job) m.job || ': its ' || m.matched || ' has the tombstone of job ' || m.tombstone "  # nosec B608  # as above
    "|| ' (' || m.status || ', checkpoint ' || m.checkpoint || ')' "
    f"FROM ({' UNION ALL '.join(_matched_on(rank, name) for rank, name in enumerate(MATCHED_ON))}) m "
    "ORDER BY m.job, m.rank"
)
