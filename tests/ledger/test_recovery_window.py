"""During a recovery window, a new key is looked up at its provider before its first side effect, on
every path that creates a job (the job table's trigger, ledger/recovery_window.py): found ->
confirmed with what was found, not found -> runs, not queryable -> waits for a person. Outside a
window nothing changes. The latest migration froze the generated trigger text."""

import re

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.loader import MigrationLoader

from ledger import recovery_window, services
from ledger.models import Job, RecoveryWindow
from ledger.runtime import run_job
from ledger.services.recovery import current_window, end_recovery_windows, open_recovery_window
from reconciliation.passes import reconcile_until_idle
from tests.conftest import event_kinds, latest_attempt
from tests.ledger.test_fast_path import _normalised, _sql_statements
from tests.reconciliation.helpers import MAIL, assert_ledger_clean, send_message

MSG, VAULT = "mail.send", "vault.rotate_credential"


def _enqueue(job_id: str, action: str = MSG, payload: dict | None = None) -> Job:
    return services.enqueue_job(job_id=job_id, tenant="acme", action=action, payload=payload or MAIL, actor="agent")


def _window() -> RecoveryWindow:
    return open_recovery_window(cause="recover", actor="test", evidence={})


def test_the_latest_migration_freezes_the_generated_triggers():
    loader = MigrationLoader(None, ignore_no_migrations=True)
    (leaf,) = loader.graph.leaf_nodes("ledger")
    frozen = {}
    for key in loader.graph.forwards_plan(leaf):
        for statement in _sql_statements(loader.graph.nodes[key].operations):
            created = re.search(rf"CREATE (?:OR REPLACE )?(?:FUNCTION|TRIGGER) ({recovery_window.HOLD}\w*)", statement)
            if created:
                frozen[created[1]] = statement
    generated = {re.search(r"(?:FUNCTION|TRIGGER) (\w+)", sql)[1]: sql for sql in recovery_window.install_sql()}
    drift = [name for name, sql in generated.items() if _normalised(frozen.get(name, "")) != _normalised(sql)]
    assert drift == [], (f"{drift}: ledger/recovery_window.py generates other SQL; freeze its install_sql() "
                         f"into a new migration after {leaf}")


@pytest.mark.django_db
def test_outside_a_window_a_new_job_is_not_held_and_runs_at_once(provider):
    _enqueue("calm")
    assert current_window() is None
    assert not Job.objects.get(job_id="calm").recovery_pending
    assert event_kinds("calm") == ["enqueued"]
    assert run_job("calm") == "succeeded"


@pytest.mark.django_db
def test_a_new_key_in_a_window_is_looked_up_and_runs_only_when_the_provider_has_nothing(provider):
    window = _window()
    _enqueue("fresh")
    job = Job.objects.get(job_id="fresh")
    assert job.recovery_pending
    assert event_kinds("fresh") == ["recovery_started", "enqueued"]
    held = job.events.get(kind="recovery_started")
    assert held.evidence["cause"] == "new_key_in_recovery_window" and held.evidence["window"] == window.pk
    assert run_job("fresh") == "refused:under_recovery"  # no side effect before the lookup
    assert provider.effects(marker=job.idempotency_key)["count"] == 0

    reconcile_until_idle()  # not found at the relay: released
    assert run_job("fresh") == "succeeded"
    assert provider.effects(marker=job.idempotency_key)["count"] == 1
    assert "recovery_released" in event_kinds("fresh")
    assert_ledger_clean()


@pytest.mark.django_db
def test_a_forgotten_key_that_already_ran_is_confirmed_with_what_the_provider_found(provider):
    sent = send_message(provider, f"{MSG}:forgotten")  # the run the restored ledger forgot
    _window()
    _enqueue("forgotten")  # its agent retries the same key
    reconcile_until_idle()
    job = Job.objects.get(job_id="forgotten")
    assert job.status == "succeeded" and not job.recovery_pending
    assert latest_attempt("forgotten").result_ref in {str(value) for value in sent.values()}  # what was found
    assert run_job("forgotten").startswith("refused")
    assert provider.effects(marker=job.idempotency_key)["count"] == 1  # never a second message
    assert_ledger_clean()


@pytest.mark.django_db
def test_a_new_key_of_an_action_that_cannot_be_queried_waits_for_a_person(provider):
    _window()
    _enqueue("rotate", VAULT, {"name": "db"})
    reconcile_until_idle()
    job = Job.objects.get(job_id="rotate")
    assert job.status == "needs_operator"
    assert run_job("rotate").startswith("refused")
    assert provider.effects(marker=job.idempotency_key)["count"] == 0


@pytest.mark.django_db
def test_every_path_that_creates_a_job_inherits_the_window(provider):
    _window()
    # The MCP gateway's one statement (enqueue, claim, begin) declines: nothing is begun.
    assert services.enqueue_claim_and_begin(job_id="gw", tenant="acme", action=MSG, payload=MAIL,
                                            worker="gateway") is None
    assert Job.objects.get(job_id="gw").recovery_pending
    assert latest_attempt("gw").side_effect_state == "not_attempted"
    # A row written in SQL by hand, past every Python check.
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO ledger_job (job_id, tenant, action, payload, identity, idempotency_key, status, "
                       "lease_seq, check_count, recovery_pending, duplicate_deliveries, claims_refused, holder) "
                       "VALUES ('raw', 'acme', %s, '{}', '{}', 'k:raw', 'pending', 0, 0, false, 0, 0, '') "
                       "RETURNING recovery_pending", [MSG])
        assert cursor.fetchone() == (True,)
    assert event_kinds("raw") == ["recovery_started"]


@pytest.mark.django_db
def test_an_operator_ends_the_window_early_with_a_note_and_new_keys_run_at_once_again(provider):
    _window()
    with pytest.raises(ValueError, match="note"):
        end_recovery_windows(actor="ops", note="  ")
    assert current_window() is not None  # the refusal changed nothing
    call_command("recover", "--end-window", "--note", "agents' retries are over", "--by", "ops")
    ended = RecoveryWindow.objects.get()
    assert ended.ended_by == "ops" and ended.end_note == "agents' retries are over"
    _enqueue("after")
    assert not Job.objects.get(job_id="after").recovery_pending


@pytest.mark.django_db
def test_recover_opens_a_window_of_the_configured_length(provider, settings):
    settings.RECKON_RECOVERY_LOOKUP_HOURS = 2
    _enqueue("before")
    call_command("recover", "--no-reconcile")
    window = current_window()
    assert window.cause == "recover"
    assert abs((window.ends_at - window.opened_at).total_seconds() - 7200) < 5
    _enqueue("during")
    assert Job.objects.get(job_id="during").recovery_pending


@pytest.mark.django_db
def test_the_overview_and_metrics_say_the_ledger_is_under_recovery(client, auditor, settings):
    client.force_login(auditor)
    assert b"data-recovery-window" not in client.get("/").content
    open_recovery_window(cause="rollback_detected", actor="ledger watch on h1 (pid 7)",
                         evidence={"lost_events": 21, "held": 3, "forgotten_jobs": 2})
    page = client.get("/").content.decode()
    assert 'data-recovery-window="rollback_detected"' in page and "The ledger lost history" in page
    assert "21 ledger events the processes had seen committed are gone; 3 jobs" in page
    settings.RECKON_METRICS_TOKEN = "t" * 20
    metrics = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {'t' * 20}").content.decode()
    assert 'reckon_ledger_recovery_window_open{cause="rollback_detected"} 1' in metrics


@pytest.mark.django_db
def test_an_open_window_fires_the_ledger_recovery_alert_and_its_end_resolves_it(provider):
    from alerts.conditions import ledger_recovery

    assert not ledger_recovery().firing
    open_recovery_window(cause="rollback_detected", actor="ledger watch on h1 (pid 7)", evidence={"lost_events": 21})
    _enqueue("held")
    reading = ledger_recovery()
    assert reading.firing and reading.links[0].count == 1
    assert "lost history it had acknowledged (21 events gone, noticed by ledger watch on h1 (pid 7))" in reading.summary
    end_recovery_windows(actor="ops", note="done")
    assert not ledger_recovery().firing
