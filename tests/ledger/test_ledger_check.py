import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from ledger import services
from ledger.invariants import find_violations
from ledger.models import HistoryCheckpoint, Job, JobTombstone, LedgerEvent
from tests.conftest import expire_lease, latest_attempt, make_job

pytestmark = pytest.mark.django_db


def _broken() -> dict[str, int]:
    return {f.check: f.count for f in find_violations() if f.count}


def _workload():
    make_job("ok")
    lease = services.claim_job(job_id="ok", worker="w")
    services.begin_side_effect(lease=lease)
    services.record_success(lease=lease, result_ref="r")
    make_job("lost")
    lease = services.claim_job(job_id="lost", worker="w")
    services.begin_side_effect(lease=lease)
    expire_lease("lost")
    services.sweep_expired_leases()
    make_job("queued")


def test_it_is_clean_after_real_work(capsys):
    _workload()
    assert _broken() == {}
    call_command("ledger_check")
    assert "all 13 invariants hold" in capsys.readouterr().out


def _raw(statement: str, params=()):
    with connection.cursor() as cursor:
        if statement.startswith("ALTER"):  # deferred FK checks of this test's transaction must run first
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute(statement, params)


@pytest.mark.parametrize("tamper, check", [
    ("UPDATE ledger_job SET status = 'succeeded' WHERE job_id = 'queued'", "status_disagrees"),
    ("UPDATE ledger_job SET status = 'running' WHERE job_id = 'queued'", "job_change_without_event"),
    ("UPDATE ledger_attempt SET lease_token = 99 WHERE lease_token IS NOT NULL", "fencing_token_ahead"),
    ("UPDATE ledger_attempt SET delivery_state = 'dead_lettered' "
     "WHERE job_id = (SELECT id FROM ledger_job WHERE job_id = 'ok')", "attempt_change_without_event"),
])
def test_it_finds_a_state_changed_behind_the_ledgers_back(tamper, check):
    _workload()
    _raw(tamper)
    assert check in _broken()
    with pytest.raises(CommandError, match=check):
        call_command("ledger_check")


def test_it_finds_constraint_violations_when_the_constraints_are_gone():
    """Belt and braces: the check does not rely on the constraints being present."""
    _workload()
    _raw("ALTER TABLE ledger_attempt DROP CONSTRAINT attempt_succeeded_consistent")
    _raw("DROP INDEX attempt_one_live_per_job")
    _raw("UPDATE ledger_attempt SET side_effect_state = 'ambiguous' WHERE execution_state = 'succeeded'")
    _raw("INSERT INTO ledger_attempt (job_id, number, delivery_state, execution_state, side_effect_state, "
         "lease_owner, result_ref, error, version) SELECT id, 2, 'queued', 'not_started', 'not_attempted', "
         "'', '', '', 1 FROM ledger_job WHERE job_id = 'queued'")
    broken = _broken()
    assert broken["inconsistent_attempt"] == 1
    assert broken["two_live_attempts"] == 1


def test_it_reports_a_disabled_history_trigger():
    _workload()
    _raw("ALTER TABLE ledger_ledgerevent DISABLE TRIGGER ALL")
    assert "history_not_protected" in _broken()


def test_it_finds_in_the_history_an_attempt_made_live_while_another_was_unknown(capsys):
    """The invariant itself, from the history: forge an event (inserts pass the triggers) that
    opens attempt 2 while attempt 1 of job "lost" is still unknown."""
    _workload()
    lost = Job.objects.get(job_id="lost")
    assert latest_attempt("lost").execution_state == "unknown" and _broken() == {}
    LedgerEvent.objects.create(
        job=lost, attempt=None, actor_type="system", actor="forger", kind="attempt_opened",
        before={"job": lost.status},
        after={"job": lost.status, "attempt": 2, "execution": "not_started", "delivery": "queued",
               "side_effect": "not_attempted"},
    )
    assert _broken() == {"live_while_unknown_in_history": 1}
    with pytest.raises(CommandError, match="live_while_unknown_in_history"):
        call_command("ledger_check")
    assert "lost: attempt 2 not_started at event" in capsys.readouterr().out


@pytest.mark.parametrize("matched", ["job_id", "idempotency_key"])
def test_it_finds_a_live_job_whose_id_or_key_has_a_tombstone(capsys, matched):
    """An archived key that ran again (issue 40: the gateway's one-statement enqueue did not read the
    tombstones): a tombstone written over a live job stands for it, as the job table's trigger
    refuses only new jobs."""
    _workload()
    ok = Job.objects.get(job_id="ok")
    checkpoint = HistoryCheckpoint.objects.create(
        partition="ledger_ledgerevent_gone", range_start=ok.created_at, range_end=ok.created_at, events=4, jobs=1,
        archive_file="/archive/gone.jsonl.gz", archive_sha256="0" * 64, archived_at=ok.created_at)
    JobTombstone.objects.create(  # its key too, as an archived job's own tombstone: one finding, by its id
        job_id="ok" if matched == "job_id" else "other", idempotency_key=ok.idempotency_key,
        tenant="acme", action="reckon.echo", status="succeeded", created_at=ok.created_at, finished_at=ok.updated_at,
        checkpoint=checkpoint)

    assert _broken() == {"job_with_tombstone": 1}
    with pytest.raises(CommandError, match="job_with_tombstone"):
        call_command("ledger_check")
    tombstone = "ok" if matched == "job_id" else "other"
    assert (f"e.g. ok: its {matched} has the tombstone of job {tombstone} (succeeded, checkpoint {checkpoint.pk})"
            in capsys.readouterr().out)
