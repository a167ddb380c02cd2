"""A silence belongs to the incident it was set for: it ends when the alert resolves, or at its
time, whichever comes first, so the next incident pages; while it holds, every message and the
pages say what is silenced, by whom, why and until when. To a real webhook receiver."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from alerts import services
from alerts.conditions import gate_closed
from alerts.evaluate import evaluate_alerts
from alerts.models import AlertEvent, AlertState
from ledger.gate import record_pass
from reconciliation import decisions
from tests.alerts.test_evaluate import database_created_ago
from tests.console.conftest import latest_version, make_unknown_job, with_tenants

pytestmark = pytest.mark.django_db


def _gate_closes(settings):
    settings.RECKON_GATE_BOUND_S = 60
    database_created_ago(3600)  # the loops should have run by now: a real stop


def test_a_silence_ends_when_its_alert_resolves_and_the_next_incident_pages(channels, settings):
    _gate_closes(settings)
    [fired] = evaluate_alerts()
    assert fired.condition == "gate_closed" and len(channels.messages) == 1
    services.alert_silence(condition="gate_closed", username="olga", note="restarting the loops", hours=4)

    record_pass("sweeper")
    record_pass("reconciler")  # the incident ends: the silence with it, and the channels hear it
    [resolved] = evaluate_alerts()
    assert (resolved.condition, resolved.firing) == ("gate_closed", False)
    state = AlertState.objects.get(condition="gate_closed")
    assert state.silenced_until is None and state.silenced_by == ""
    ended = AlertEvent.objects.get(kind="silence_ended")
    assert ended.note == "the silence set by olga ended: the alert resolved"

    # 47 minutes later the gate closes again: a new incident, and it pages.
    settings.RECKON_GATE_BOUND_S = 0.001
    [again] = evaluate_alerts()
    assert (again.condition, again.firing) == ("gate_closed", True)
    assert channels.texts[-1].startswith("[Reckon] FIRING: Dead-man gate closed")


def test_a_silence_ends_at_its_time_and_the_channels_hear_what_holds_then(channels, settings):
    settings.RECKON_ALERT_UNKNOWN_AGE_S = 0
    make_unknown_job("inv-1")
    evaluate_alerts()
    services.alert_silence(condition="unknown_too_old", username="olga", note="billing is down", hours=1)
    AlertState.objects.filter(condition="unknown_too_old").update(
        silenced_until=timezone.now() - timedelta(seconds=1))  # the hour passes
    assert evaluate_alerts() == []  # still firing, as the channels were told
    assert AlertEvent.objects.get(kind="silence_ended").note == "the silence set by olga ended: its time was up"
    assert AlertState.objects.get(condition="unknown_too_old").silenced_until is None


def test_every_message_names_the_silences_in_force(channels, settings, operator):
    _gate_closes(settings)
    evaluate_alerts()
    services.alert_silence(condition="gate_closed", username="olga", note="restarting the loops", hours=4)
    settings.RECKON_ALERT_UNKNOWN_AGE_S = 0
    make_unknown_job("inv-1")
    [fired] = evaluate_alerts()
    assert fired.condition == "unknown_too_old"
    until = AlertState.objects.get(condition="gate_closed").silenced_until
    assert (f"Silenced: Dead-man gate closed: Reckon's own loops stopped is silenced until {until:%Y-%m-%d %H:%M} UTC "
            'or until it resolves, whichever comes first (olga: "restarting the loops").') in channels.texts[-1]


def test_a_clear_alert_cannot_be_silenced_and_nothing_changes(channels, settings):
    evaluate_alerts()
    with pytest.raises(services.AlertRefused, match="not firing: a silence belongs to an incident"):
        services.alert_silence(condition="unknown_too_old", username="olga", note="just in case", hours=4)
    assert AlertState.objects.get(condition="unknown_too_old").silenced_until is None
    assert not AlertEvent.objects.filter(kind="silenced").exists()


def test_the_pages_say_what_is_silenced_until_when_and_the_overview_shows_it_for_the_next_shift(
        channels, settings, client, operator):
    settings.RECKON_ALERT_UNKNOWN_AGE_S = 0
    make_unknown_job("inv-1")
    evaluate_alerts()
    services.alert_silence(condition="unknown_too_old", username="olga", note="billing is down", hours=4)
    client.force_login(with_tenants(operator))
    for path in ("/alerts/", "/"):
        page = client.get(path).content.decode()
        assert "Unknown work older than its bound is silenced until" in page
        assert "or until it resolves, whichever comes first (olga: &quot;billing is down&quot;)" in page
    decisions.cancel_job(job_id="inv-1", version=latest_version("inv-1"), user=operator, note="done")
    evaluate_alerts()  # resolved: the silence is over, and the pages stop saying it
    assert "is silenced until" not in client.get("/").content.decode()


def test_without_a_channel_the_page_says_nothing_is_sent(settings, client, operator):
    settings.RECKON_ALERT_UNKNOWN_AGE_S = 0
    settings.RECKON_ALERT_WEBHOOK_URL, settings.RECKON_ALERT_EMAILS = "", []
    make_unknown_job("inv-1")
    evaluate_alerts()
    client.force_login(with_tenants(operator))
    page = client.get("/alerts/").content.decode()
    assert 'data-notifications="no_channel">none: no channel is configured' in page
    assert "No alert channel is configured" in page and ">sent<" not in page


def test_with_a_channel_the_page_says_when_it_was_sent(channels, settings, client, operator):
    settings.RECKON_ALERT_UNKNOWN_AGE_S = 0
    make_unknown_job("inv-1")
    evaluate_alerts()
    client.force_login(with_tenants(operator))
    page = client.get("/alerts/").content.decode()
    assert 'data-notifications="sent">sent <time' in page and "No alert channel is configured" not in page


def test_the_navigation_counts_the_firing_alerts_on_every_page(channels, settings, client, operator):
    client.force_login(with_tenants(operator))
    assert "data-alerts-firing-count" not in client.get("/queue/").content.decode()
    settings.RECKON_ALERT_UNKNOWN_AGE_S = 0
    make_unknown_job("inv-1")
    evaluate_alerts()
    for path in ("/queue/", "/jobs/inv-1/", "/"):
        page = client.get(path).content.decode()
        assert ('<span class="badge badge-alert" data-alerts-firing-count>1<span class="visually-hidden"> firing'
                in page), path


def test_a_fresh_database_raises_no_gate_alarm_before_the_loops_first_pass(channels, settings):
    settings.RECKON_GATE_BOUND_S = 60
    database_created_ago(10)  # the first start: the loops have not had time for a pass
    assert evaluate_alerts() == []
    assert not AlertState.objects.get(condition="gate_closed").firing
    assert gate_closed().summary.startswith("Reckon is starting: the sweeper and the reconciler have not completed")
    database_created_ago(61)  # past the bound with still no pass: that is a real stop
    [fired] = evaluate_alerts()
    assert (fired.condition, fired.firing) == ("gate_closed", True)
