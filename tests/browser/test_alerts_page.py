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
    expect(page.get_by_role("status")).to_contain_text("Silenced for 4 h.")
    expect(page.locator("[data-silenced]")).to_contain_text("silenced until")
    history = page.locator("[data-alert-history]")
    expect(history.locator('[data-alert-event="acknowledged"]')).to_contain_text("on it: billing answers slowly")
    expect(history.locator('[data-alert-event="silenced"]')).to_contain_text("maintenance until noon")
    for width in (1400, 390):
        page.set_viewport_size({"width": width, "height": 900})
        assert_no_serious_violations(page, f"alerts-acted-{width}")
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
