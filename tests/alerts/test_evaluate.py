"""Alerts: each condition notifies once when it starts, stays quiet while it holds, sends a
"resolved" note when it clears, and fires again when it returns; to a real webhook receiver and
to Django's mail outbox."""

from __future__ import annotations

import logging
import re
import threading
from datetime import timedelta

import pytest
from django.core import mail
from django.db import connection
from django.db.migrations.recorder import MigrationRecorder
from django.utils import timezone

from alerts.evaluate import evaluate_alerts
from alerts.models import AlertState
from chaos.world import wait_until
from ledger.gate import record_pass
from ledger.models import Job
from reconciliation import decisions
from reconciliation.passes import reconcile_until_idle
from tests.alerts.conftest import Receiver
from tests.console.conftest import latest_version, make_operator_job, make_unknown_job, with_tenants
from tests.reconciliation.helpers import MAIL, send_message, unknown_job

pytestmark = pytest.mark.django_db


def test_it_fires_once_stays_quiet_resolves_and_fires_again(channels, settings, operator):
    settings.RECKON_ALERT_UNKNOWN_AGE_S = 0  # every unknown job is past the bound
    make_unknown_job("inv-1")

    [fired] = evaluate_alerts()
    assert (fired.condition, fired.firing, fired.channels) == ("unknown_too_old", True, ["webhook", "email"])
    [text] = channels.texts
    assert text.startswith("[Reckon] FIRING: Unknown work older than its bound")
    assert "1 unknown job older than 0 s (acme 1): 1 reconciling; the oldest (acme, needs_reconciliation)" in text
    assert "Reconciling (1): https://reckon.example.com/queue/?tab=reconciling&older_than_s=0" in text
    [email] = mail.outbox
    assert email.to == ["oncall@example.com"] and email.subject.startswith("[Reckon] FIRING")
    assert "acme 1" in email.body and "inv-1" not in email.body

    make_unknown_job("inv-2")  # the condition still holds (now two jobs): no second message
    assert evaluate_alerts() == []
    assert len(channels.messages) == 1 and len(mail.outbox) == 1

    for job_id in ("inv-1", "inv-2"):
        decisions.cancel_job(job_id=job_id, version=latest_version(job_id), user=operator, note="handled")
    [resolved] = evaluate_alerts()
    assert (resolved.condition, resolved.firing) == ("unknown_too_old", False)
    assert channels.texts[1].startswith("[Reckon] RESOLVED: Unknown work older than its bound")
    assert mail.outbox[1].subject.startswith("[Reckon] RESOLVED")
    assert evaluate_alerts() == []  # clear stays quiet too

    make_unknown_job("inv-3")
    [again] = evaluate_alerts()
    assert (again.condition, again.firing) == ("unknown_too_old", True)
    assert "1 unknown job" in channels.texts[2] and len(mail.outbox) == 3


def test_the_approvals_alert_fires_on_the_oldest_and_counts_what_the_approvals_page_lists(
        channels, settings, client, operator):
    settings.RECKON_ALERT_APPROVAL_WAIT_S = 90
    for job_id in ("vault-1", "vault-new"):
        make_operator_job(job_id)
        decisions.mark_not_found(job_id=job_id, version=latest_version(job_id), user=operator, note="none")
    make_operator_job("vault-2")  # waits for an operator, not for an approval
    assert evaluate_alerts() == []  # nothing has waited 90 s yet
    _age("vault-1", minutes=3)  # its job and its approval request were made three minutes ago

    [fired] = evaluate_alerts()
    assert fired.condition == "approval_waiting"
    text = channels.texts[0]
    assert "2 approval requests pending (acme 2); the oldest (acme) has waited 3 min, longer than 1 min 30 s" in text
    path = text.split("Pending (2): https://reckon.example.com", 1)[1]
    assert path == "/approvals/"
    client.force_login(with_tenants(operator))
    page = client.get(path).content.decode()
    assert re.search(r"data-pending-count>(\d+)<", page).group(1) == "2"


def test_a_conflict_answer_alerts_until_a_person_resolves_it(channels, provider, operator):
    unknown_job("m1", "mail.send", MAIL)
    send_message(provider, "mail.send:m1", {**MAIL, "subject": "Wrong"})
    [decision] = reconcile_until_idle()
    assert decision.applied == "escalated"

    [fired] = evaluate_alerts()
    assert fired.condition == "reconciliation_conflict"
    assert "Reconciliation answered conflict: 1 escalated job needs a person (acme 1; 1 by a conflict)" \
        in channels.texts[0]
    assert "Escalated (1): https://reckon.example.com/queue/?tab=human&status=escalated" in channels.texts[0]
    assert evaluate_alerts() == []

    decisions.confirm_effect(job_id="m1", version=latest_version("m1"), user=operator, note="it is ours")
    [resolved] = evaluate_alerts()
    assert (resolved.condition, resolved.firing) == ("reconciliation_conflict", False)


def database_created_ago(seconds: float) -> None:
    """As if the ledger's tables were created `seconds` ago (rolled back with the test)."""
    MigrationRecorder.Migration.objects.filter(app="ledger").update(applied=timezone.now() - timedelta(seconds=seconds))


def test_the_dead_man_gate_closing_alerts_and_reopening_resolves(channels, settings):
    settings.RECKON_GATE_BOUND_S = 60  # no loop has completed a pass yet: closed
    database_created_ago(3600)  # not a fresh start: the loops should have run by now
    [fired] = evaluate_alerts()
    assert fired.condition == "gate_closed"
    assert "The dead-man gate is closed: the sweeper has not completed a pass yet" in channels.texts[0]
    assert "Held (0): https://reckon.example.com/" in channels.texts[0]
    assert evaluate_alerts() == []

    record_pass("sweeper")
    assert evaluate_alerts() == []  # the reconciler still has not: still closed
    record_pass("reconciler")
    [resolved] = evaluate_alerts()
    assert (resolved.condition, resolved.firing) == ("gate_closed", False)
    assert channels.texts[1].startswith("[Reckon] RESOLVED: Dead-man gate closed")


def test_an_undelivered_alert_leaves_the_state_and_is_sent_by_the_next_pass(channels, settings):
    settings.RECKON_ALERT_UNKNOWN_AGE_S = 0
    settings.RECKON_ALERT_EMAILS = []
    make_unknown_job("inv-1")
    channels.status = 500
    assert evaluate_alerts() == []
    state = AlertState.objects.get(condition="unknown_too_old")
    assert state.firing and not state.told_firing  # found, and still due

    channels.status = 200
    [fired] = evaluate_alerts()
    assert fired.firing and len(channels.messages) == 2  # the refused one, then the delivered one


def test_one_channel_down_does_not_silence_the_other(channels, settings):
    settings.RECKON_ALERT_UNKNOWN_AGE_S = 0
    settings.RECKON_ALERT_WEBHOOK_URL = "file:///etc/passwd"  # not an http(s) URL: refused
    make_unknown_job("inv-1")
    [fired] = evaluate_alerts()
    assert fired.channels == ["email"] and len(mail.outbox) == 1


def test_an_alert_names_no_job_only_how_many_each_tenant_has(channels, settings):
    """One channel hears about every tenant: job ids stay behind the console's tenant fence."""
    settings.RECKON_ALERT_UNKNOWN_AGE_S = 0
    jobs = {"acme": 3, "globex": 2, "initech": 1, "umbrella": 1, "hooli": 1, "wonka": 1, "stark": 1}
    ids = [f"secret-{tenant}-{n}" for tenant, count in jobs.items() for n in range(count)]
    for job_id in ids:
        make_unknown_job(job_id, tenant=job_id.split("-")[1])
    [fired] = evaluate_alerts()
    [text] = channels.texts
    assert "10 unknown jobs older than 0 s (acme 3, globex 2, hooli 1, initech 1, stark 1, 2 in 2 other tenants)" \
        in text
    assert "the oldest (acme, needs_reconciliation)" in text
    assert not any(job_id in text or job_id in mail.outbox[0].body for job_id in ids)
    assert "secret-" not in AlertState.objects.get(condition="unknown_too_old").summary


def test_a_redirect_is_not_followed_and_counts_as_undelivered(channels, settings, caplog):
    """A webhook answering 3xx could point the worker host anywhere: the alert goes nowhere else."""
    settings.RECKON_ALERT_UNKNOWN_AGE_S = 0
    elsewhere = Receiver()
    try:
        channels.redirect_to = elsewhere.url
        make_unknown_job("inv-1")
        with caplog.at_level(logging.ERROR, logger="reckon.alerts"):
            [fired] = evaluate_alerts()
        assert fired.channels == ["email"]  # the webhook's 302 is a failed delivery
        assert len(channels.messages) == 1 and elsewhere.requests == []
        [record] = [r for r in caplog.records if r.name == "reckon.alerts"]
        assert record.getMessage().startswith("alert not delivered by webhook")
        assert f"redirect to {elsewhere.url} not followed" in record.exc_text

        settings.RECKON_ALERT_EMAILS = []  # the webhook alone: its redirect leaves the alert unsent
        make_unknown_job("inv-2")
        AlertState.objects.filter(condition="unknown_too_old").update(told_firing=False)
        assert evaluate_alerts() == [] and elsewhere.requests == []
    finally:
        elsewhere.close()


def test_without_a_channel_the_state_is_recorded_and_told_once_a_channel_is_set(channels, settings):
    settings.RECKON_ALERT_UNKNOWN_AGE_S = 0
    settings.RECKON_ALERT_WEBHOOK_URL = ""
    settings.RECKON_ALERT_EMAILS = []
    make_unknown_job("inv-1")
    assert evaluate_alerts() == []
    state = AlertState.objects.get(condition="unknown_too_old")
    assert state.firing and not state.told_firing  # the console's alerts page shows it
    settings.RECKON_ALERT_WEBHOOK_URL = channels.url
    [fired] = evaluate_alerts()
    assert fired.firing and len(channels.messages) == 1


@pytest.mark.django_db(transaction=True)
def test_two_evaluators_at_once_send_one_message(channels, settings):
    """The first evaluator holds the condition's row lock while the webhook has not answered;
    the second waits for it, then finds the condition already firing and sends nothing."""
    settings.RECKON_ALERT_UNKNOWN_AGE_S = 0
    settings.RECKON_ALERT_EMAILS = []
    make_unknown_job("inv-1")
    AlertState.objects.create(condition="unknown_too_old")
    channels.hold.clear()
    results = {}

    def evaluate(name):
        try:
            results[name] = evaluate_alerts()
        finally:
            connection.close()

    first = threading.Thread(target=evaluate, args=("first",))
    first.start()
    assert channels.arrived.wait(timeout=10)  # the first is sending, its row lock held
    second = threading.Thread(target=evaluate, args=("second",))
    second.start()
    wait_until(_a_session_waits_on_a_lock, timeout=10, what="the second evaluator to block on the row lock")
    channels.hold.set()
    first.join(timeout=20)
    second.join(timeout=20)
    assert len(channels.messages) == 1
    assert [n.condition for n in results["first"]] == ["unknown_too_old"] and results["second"] == []
    assert Job.objects.filter(job_id="inv-1").exists()


def _age(job_id: str, minutes: int) -> None:
    """Backdate a job and its approval requests (test setup only: time, not state)."""
    with connection.cursor() as cursor:
        cursor.execute("UPDATE ledger_job SET created_at = now() - make_interval(mins => %s) WHERE job_id = %s",
                       [minutes, job_id])
        cursor.execute("UPDATE approvals_approvalrequest SET created_at = now() - make_interval(mins => %s) "
                       "WHERE job_id = (SELECT id FROM ledger_job WHERE job_id = %s)", [minutes, job_id])


def _a_session_waits_on_a_lock() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                       "AND datname = current_database()")
        return bool(cursor.fetchone()[0])
