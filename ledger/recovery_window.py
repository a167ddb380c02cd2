"""A new key during a recovery window is looked up before its first side effect: the rule as the
database holds it, on every path that creates a job (enqueue_job, the gateway's one-statement
enqueue of ledger.fastpath, a bulk load, raw SQL): "a new path inherits every rule".

A BEFORE INSERT trigger on the job table sets `recovery_pending` on a job created while a recovery
window (ledger.models.RecoveryWindow) is open; the reconciler then looks its key up at the provider
(found: confirmed with what was found; not found: released to run; an action that cannot be
queried: in front of a person), as `recover` does for the jobs it holds. An AFTER INSERT trigger,
only for such a job (its WHEN costs nothing otherwise), writes the `recovery_started` event that
says why, in the same transaction. Outside a window the cost is one probe of a partial index on a
table of a few rows per job inserted, inside the insert's own statement: no query of its own.

Migrations freeze the text they install and never import this module: when its output changes,
tests/ledger/test_recovery_window.py fails and names the migration to write.
"""

from __future__ import annotations

from ledger.models import Job, LedgerEvent, RecoveryWindow
from ledger.states import ActorType, EventKind

HOLD = "reckon_job_recovery_window"
RECORD = "reckon_job_recovery_window_event"
JOBS = Job._meta.db_table
WINDOWS = RecoveryWindow._meta.db_table
EVENTS = LedgerEvent._meta.db_table
ACTOR = "recovery window"
NOTE = ("a new key during a recovery window may be one the ledger forgot: no side effect until "
        "reconciliation has looked it up at the provider")

OPEN_WINDOW = (f"SELECT w.id, w.ends_at, w.cause FROM {WINDOWS} w "  # nosec B608  # SQL generated from the models' names, no input
               "WHERE w.ended_at IS NULL AND w.ends_at > statement_timestamp() ORDER BY w.ends_at DESC LIMIT 1")


def hold_sql() -> str:
    return f"""
CREATE OR REPLACE FUNCTION {HOLD}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT NEW.recovery_pending AND EXISTS ({OPEN_WINDOW}) THEN
        NEW.recovery_pending := true;
    END IF;
    RETURN NEW;
END $$;
"""  # nosec B608  # SQL generated from the models' names, no input


def record_sql() -> str:
    return f"""
CREATE OR REPLACE FUNCTION {RECORD}() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    win record;
BEGIN
    SELECT * INTO win FROM ({OPEN_WINDOW}) o;
    INSERT INTO {EVENTS} (job_id, attempt_id, actor_type, actor, kind, "before", "after", note, evidence,
                          prev_hash, hash)
    VALUES (NEW.id, NULL, '{ActorType.SYSTEM.value}', '{ACTOR}', '{EventKind.RECOVERY_STARTED.value}', jsonb_build_object('job', NEW.status),
            jsonb_build_object('job', NEW.status), '{NOTE}',
            jsonb_build_object('cause', 'new_key_in_recovery_window', 'window', win.id, 'window_cause', win.cause,
                               'window_ends_at', win.ends_at),
            '', '');
    RETURN NULL;
END $$;
"""  # nosec B608  # SQL generated from the models' names and our vocabulary, no input


def triggers_sql() -> list[str]:
    return [
        f"CREATE TRIGGER {HOLD} BEFORE INSERT ON {JOBS} FOR EACH ROW EXECUTE FUNCTION {HOLD}()",
        f"CREATE TRIGGER {RECORD} AFTER INSERT ON {JOBS} FOR EACH ROW WHEN (NEW.recovery_pending) "
        f"EXECUTE FUNCTION {RECORD}()",
    ]


def install_sql() -> list[str]:
    """What a migration runs, in order."""
    return [hold_sql(), record_sql(), *triggers_sql()]


def undo_sql() -> list[str]:
    return [f"DROP TRIGGER IF EXISTS {RECORD} ON {JOBS}", f"DROP TRIGGER IF EXISTS {HOLD} ON {JOBS}",
            f"DROP FUNCTION IF EXISTS {RECORD}()", f"DROP FUNCTION IF EXISTS {HOLD}()"]
