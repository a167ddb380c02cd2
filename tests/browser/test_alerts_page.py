"""The alerts page in a browser: an operator sees what fires, acknowledges it and silences it with
a note, and the history says who and why; axe finds nothing serious at desktop and phone widths."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from alerts.evaluate import evaluate_alerts
from tests.browser.axe import assert_no_serious_violations
from tests.console.conftest import make_unknown_job, with_tenants

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_an_operator_acknowledges_and_silences_a_firing_alert(live_server, browser, log_in, operator, settings):
    settings.RECKON_ALERT_UNKNOWN_AGE_S = 0
    settings.RECKON_ALERT_WEBHOOK_URL = ""
    settings.RECKON_ALERT_EMAILS = []
    make_unknown_job("inv-1")
    evaluate_alerts()  # recorded without a channel: the page shows it
    page = log_in(browser, with_tenants(operator))
    for width in (1400, 390):  # the overview's line about what fires
        page.set_viewport_size({"width": width, "height": 900})
        assert_no_serious_violations(page, f"overview-alerts-firing-{width}")
    page.get_by_role("link", name="1 alert firing").click()
    expect(page.get_by_role("heading", name="Unknown work older than its bound")).to_be_visible()
    expect(page.locator("[data-firing-since]")).to_contain_text(re.compile(r"\d\d:\d\d:\d\d"))
    for width in (1400, 390):
        page.set_viewport_size({"width": width, "height": 900})
        assert_no_serious_violations(page, f"alerts-firing-{width}")

    alert = page.locator('[data-alert="unknown_too_old"]')
    alert.get_by_label("Note").fill("on it: billing answers slowly")
    alert.get_by_role("button", name="Acknowledge").click()
    expect(page.get_by_role("status")).to_contain_text("Acknowledged.")
    expect(page.locator("[data-acknowledged]")).to_contain_text(f"by {operator.username}")

    alert = page.locator('[data-alert="unknown_too_old"]')
    alert.get_by_label("Note").fill("maintenance until noon")
    alert.get_by_label("Silence for").select_option("4")
    alert.get_by_role("button", name="Silence").click()
    expect(page.get_by_role("status")).to_contain_text("Silenced for 4 h, or until the alert resolves")
    expect(page.locator("[data-silenced]")).to_contain_text("silenced until")
    history = page.locator("[data-alert-history]")
    expect(history.locator('[data-alert-event="acknowledged"]')).to_contain_text("on it: billing answers slowly")
    expect(history.locator('[data-alert-event="silenced"]')).to_contain_text("maintenance until noon")
    for width in (1400, 390):
        page.set_viewport_size({"width": width, "height": 900})
        assert_no_serious_violations(page, f"alerts-acted-{width}")
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")


def test_a_silence_ends_with_its_alert_and_the_next_incident_pages(live_server, browser, log_in, operator, settings):
    """Issue 44: a 4-hour silence set while the gate was closed hid the gate's next closing. Now
    the silence ends when its alert resolves; the next incident reaches the webhook and the
    navigation's count on the page the operator is on."""
    from datetime import timedelta

    from django.utils import timezone

    from ledger.gate import record_pass
    from ledger.models import PassRecord
    from tests.alerts.conftest import Receiver

    webhook = Receiver()
    try:
        settings.RECKON_ALERT_WEBHOOK_URL, settings.RECKON_ALERT_EMAILS = webhook.url, []
        settings.RECKON_GATE_BOUND_S = 60
        for loop in ("sweeper", "reconciler"):  # their last passes an hour ago: the gate is closed
            PassRecord.objects.create(name=loop, completed_at=timezone.now() - timedelta(hours=1))
        evaluate_alerts()
        assert len(webhook.texts) == 1 and webhook.texts[0].startswith("[Reckon] FIRING: Dead-man gate closed")
        page = log_in(browser, with_tenants(operator))
        page.goto(f"{live_server.url}/queue/")
        expect(page.locator("#nav-alerts [data-alerts-firing-count]")).to_contain_text("1")
        page.locator("#nav-alerts").click()
        alert = page.locator('[data-alert="gate_closed"]')
        expect(alert.locator("[data-notifications]")).to_contain_text("sent")
        alert.get_by_label("Note").fill("restarting the loops")
        alert.get_by_label("Silence for").select_option("4")
        alert.get_by_role("button", name="Silence").click()
        expect(page.locator("[data-silence]").first).to_contain_text(
            'is silenced until')
        expect(page.locator("[data-silence]").first).to_contain_text('(olga: "restarting the loops")')
        page.goto(f"{live_server.url}/")  # the overview, where the next shift starts, says it too
        expect(page.locator("[data-silence]")).to_contain_text("Dead-man gate closed")
        for width in (1400, 390):
            page.set_viewport_size({"width": width, "height": 900})
            assert_no_serious_violations(page, f"overview-silenced-{width}")

        record_pass("sweeper")
        record_pass("reconciler")  # the loops run again: the incident, and its silence, end
        evaluate_alerts()
        assert webhook.texts[-1].startswith("[Reckon] RESOLVED: Dead-man gate closed")
        page.reload()
        expect(page.locator("[data-silence]")).to_have_count(0)
        expect(page.locator("#nav-alerts [data-alerts-firing-count]")).to_have_count(0)

        settings.RECKON_GATE_BOUND_S = 0.001  # 47 minutes later the gate closes again
        evaluate_alerts()
        assert len(webhook.texts) == 3 and webhook.texts[-1].startswith("[Reckon] FIRING: Dead-man gate closed")
        page.goto(f"{live_server.url}/queue/")
        expect(page.locator("#nav-alerts [data-alerts-firing-count]")).to_contain_text("1")
        page.locator("#nav-alerts").click()
        expect(page.locator('[data-alert="gate_closed"] [data-notifications]')).to_contain_text("sent")
        history = page.locator("[data-alert-history]")
        expect(history.locator('[data-alert-event="silence_ended"]')).to_contain_text(
            "the silence set by olga ended: the alert resolved")
        for width in (1400, 390):
            page.set_viewport_size({"width": width, "height": 900})
            assert_no_serious_violations(page, f"alerts-next-incident-{width}")
    finally:
        webhook.close()
