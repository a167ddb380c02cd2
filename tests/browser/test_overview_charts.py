"""The overview's charts in a real browser: drawn (the marks have a size on screen), styled from
our static CSS under the CSP (no violation reported), readable as a table, and switchable to the
last seven days."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from alerts.models import LevelSample
from alerts.sampling import count_events, sample_levels
from ledger import services
from tests.conftest import make_job
from tests.console.conftest import make_unknown_job

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_the_overview_draws_its_charts_over_time(page_factory):
    for n in range(3):
        make_unknown_job(f"inv-{n}")
    make_job("plain")
    services.claim_job(job_id="plain", worker="w")
    earlier = timezone.now() - timedelta(hours=5)
    LevelSample.objects.create(sampled_at=earlier, unknown_work=8, waiting_for_human=4, oldest_unknown_age_s=7200)
    sample_levels()  # now: 3 unknown, none waiting for a person
    count_events()
    page, violations = page_factory()

    levels = page.locator('figure[data-chart="levels"]')
    expect(levels.locator("svg.chart-svg")).to_be_visible()
    unknown = levels.locator('circle[data-series="unknown"]')
    expect(unknown).to_have_count(2)
    assert [unknown.nth(i).get_attribute("data-value") for i in range(2)] == ["8", "3"]
    box = unknown.nth(0).bounding_box()
    assert box and box["width"] > 0 and box["height"] > 0
    # Styled by reckon.css: the line has a stroke colour and no fill.
    line = levels.locator("polyline.series-unknown").first
    assert line.evaluate("e => getComputedStyle(e).stroke") not in ("none", "")
    expect(levels.locator('[data-latest="unknown"]')).to_have_text("3 unknown")

    throughput = page.locator('figure[data-chart="throughput"]')
    assert throughput.locator('circle[data-series="claimed"][data-value="4"]').count() == 1  # 3 unknown + 1 plain

    levels.get_by_text("The figures as a table").click()
    table = levels.locator('table[data-chart-table="levels"]')
    expect(table).to_be_visible()
    expect(table.locator("tbody tr")).to_have_count(24)

    page.get_by_role("link", name="last 7 days").click()
    expect(page.locator("#overview-charts")).to_have_attribute("data-window", "7d")
    # Six-hour buckets: the two samples share one (its highest value drawn) unless a boundary lies between.
    same_bucket = earlier.hour // 6 == timezone.now().hour // 6 and earlier.date() == timezone.now().date()
    week = page.locator('figure[data-chart="levels"] circle[data-series="unknown"]')
    expect(week).to_have_count(1 if same_bucket else 2)
    assert week.first.get_attribute("data-value") == "8"
    assert violations == []


@pytest.fixture
def page_factory(browser, log_in, auditor, artifacts):
    from tests.console.conftest import with_tenants

    def open_overview():
        page = log_in(browser, with_tenants(auditor))
        violations = []
        page.on("console", lambda message: violations.append(message.text)
                if "Content Security Policy" in message.text else None)
        page.reload()
        expect(page.locator("#overview-charts")).to_be_visible()
        page.screenshot(path=str(artifacts / "overview-charts.png"), full_page=True)
        return page, violations

    return open_overview
