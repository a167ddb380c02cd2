"""The header's job search and two operators racing on one job, in a real browser."""

import re

import pytest
from playwright.sync_api import expect

from ledger.models import Job
from tests.conftest import _persona, make_job
from tests.console.conftest import latest_version, make_unknown_job, with_tenants

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture
def operator2(db):
    return with_tenants(_persona("otto", "operators"))


def test_the_header_search_finds_any_job_in_any_case(live_server, browser, log_in, operator, artifacts):
    from reconciliation import decisions

    make_unknown_job("Inv-2041")
    make_unknown_job("inv-2042")
    decisions.decide("confirm_effect", job_id="inv-2042", version=latest_version("inv-2042"), user=operator,
                     note="seen at the provider")  # resolved: the queue no longer shows it, the search does
    make_job("mail-9")
    page = log_in(browser, operator)

    search = page.get_by_role("search").get_by_label("Find a job")
    search.fill("INV-204")
    search.press("Enter")
    expect(page).to_have_url(re.compile(r"/search/\?q=INV-204$"))
    results = page.locator("#search-results")
    expect(results.locator("tr[data-job]")).to_have_count(2)
    expect(results.locator('tr[data-job="inv-2042"]')).to_contain_text("succeeded")
    page.screenshot(path=artifacts / "search.png", full_page=True)
    # On the results page, the results follow the typing (and a full id stays on the page).
    page.get_by_label("Id, key, marker or a value").fill("inv-2041")
    expect(results.locator("tr[data-job]")).to_have_count(1)
    expect(page).to_have_url(re.compile(r"/search/\?q=inv-2041$"))
    results.get_by_role("link", name="Inv-2041").click()
    expect(page.get_by_role("heading", name=re.compile("Job Inv-2041"))).to_be_visible()

    # A full key (the marker) opens its job at once.
    search = page.get_by_role("search").get_by_label("Find a job")
    search.fill("billing.create_invoice:inv-2042")
    search.press("Enter")
    expect(page).to_have_url(f"{live_server.url}/jobs/inv-2042/")
    expect(page.locator("[data-job-status]")).to_have_text("succeeded")

    search = page.get_by_role("search").get_by_label("Find a job")
    search.fill("nothing-like-this")
    search.press("Enter")
    expect(page.locator("[data-no-match]")).to_contain_text("No job matches “nothing-like-this”")


def test_the_second_operator_is_told_who_won_and_keeps_the_note(
    live_server, browser, log_in, operator, operator2, artifacts
):
    make_unknown_job("inv-7")
    mine = log_in(browser, operator)
    theirs = log_in(browser, operator2)
    for page in (mine, theirs):
        page.goto(f"{live_server.url}/jobs/inv-7/")
        expect(page.get_by_role("heading", name="Decision")).to_be_visible()

    theirs.get_by_label("Note").fill("finance must look at this one")
    theirs.get_by_role("button", name="Escalate").click()
    expect(theirs.locator("#decision-panel .notice-success")).to_contain_text("Escalate: recorded.")

    note = "customer confirmed by phone that nothing arrived"
    mine.get_by_label("Note").fill(note)
    mine.get_by_role("button", name="Cancel job").click()
    mine.get_by_role("button", name="Yes, cancel job").click()  # cancelling asks first, in the page
    warning = mine.locator("#decision-panel p.notice-warning")
    expect(warning).to_have_text(re.compile(
        r"otto escalated this job at \d\d:\d\d:\d\d \(just now\) — your decision was not applied\. "
        r"Their note: finance must look at this one"))
    expect(mine.get_by_label("Note")).to_have_value(note)
    expect(mine.locator("[data-job-status]")).to_have_text("escalated")  # the page shows the job as it is now
    mine.screenshot(path=artifacts / "race.png", full_page=True)
    assert Job.objects.get(job_id="inv-7").status == "escalated"

    # Deciding again on the new state goes through, with the note they had typed.
    mine.get_by_role("button", name="Cancel job").click()
    mine.get_by_role("button", name="Yes, cancel job").click()
    expect(mine.locator("#decision-panel .notice-success")).to_contain_text("Cancel job: recorded.")
    event = Job.objects.get(job_id="inv-7").events.get(kind="operator_cancelled")
    assert (event.actor, event.note) == (operator.username, note)


def _fits(page, width: int) -> None:
    """Nothing to scroll sideways; at a desk's width no table cell cut off, on a phone's every row a
    card whose cells say their column (as tests/browser/test_layout.py checks)."""
    from tests.browser.test_layout import CLIPPED_CELLS, OVERFLOW

    size = page.evaluate(OVERFLOW)
    assert size["scroll"] <= size["client"], size
    if width > 1000:
        assert page.evaluate(CLIPPED_CELLS) == []
    else:
        unlabelled = page.locator(":is(table.queue, table.audit) tbody td:not([data-label], .empty)")
        assert unlabelled.count() == 0


def test_a_pasted_payload_value_finds_its_jobs_page_after_page(live_server, browser, log_in, operator, artifacts):
    """60 mails to one customer's domain, one of them failed with the provider's error: the
    search by the pasted domain pages through them newest first (htmx, and the same links without
    it), the audit page finds the same jobs, and axe finds nothing serious at 1400 and 390 px."""
    from tests.browser.axe import assert_no_serious_violations

    for n in range(60):
        make_job(f"receipt-{n:03d}", action="reckon.echo",
                 payload={"to": f"buyer{n}@Northwind.example", "subject": "Your receipt"})
    make_job("other-1", payload={"to": "someone@else.example"})
    page = log_in(browser, operator)
    search = page.get_by_role("search").get_by_label("Find a job")
    search.fill("@northwind.EXAMPLE")
    search.press("Enter")
    results = page.locator("#search-results")
    expect(results.locator("tr[data-job]")).to_have_count(50)
    expect(results.locator("tr[data-job]").first).to_have_attribute("data-job", "receipt-059")
    expect(results.locator("caption")).to_contain_text("more match on the next page")
    for width in (1400, 390):
        page.set_viewport_size({"width": width, "height": 900})
        assert_no_serious_violations(page, f"search-payload-value-{width}")
        _fits(page, width)
    page.set_viewport_size({"width": 1400, "height": 900})

    results.get_by_role("link", name="Older matches").click()
    expect(results.locator("tr[data-job]")).to_have_count(10)
    expect(results.locator("tr[data-job]").first).to_have_attribute("data-job", "receipt-009")
    expect(results.locator("tr[data-job]").last).to_have_attribute("data-job", "receipt-000")
    expect(page).to_have_url(re.compile(r"/search/\?q=%40northwind.EXAMPLE&before=\d+$"))
    expect(results.get_by_role("link", name="Older matches")).to_have_count(0)
    page.screenshot(path=artifacts / "search-page-2.png", full_page=True)
    for width in (1400, 390):
        page.set_viewport_size({"width": width, "height": 900})
        assert_no_serious_violations(page, f"search-page-2-{width}")
        _fits(page, width)
    page.reload()  # the pushed URL is the same page without htmx
    expect(results.locator("tr[data-job]")).to_have_count(10)
    results.get_by_role("link", name="Newest matches").click()
    expect(results.locator("tr[data-job]")).to_have_count(50)

    page.goto(f"{live_server.url}/audit/")
    page.get_by_label("Find (id, key, marker or a value)").fill("buyer7@northwind")
    page.get_by_role("button", name="Search").click()
    expect(page.locator("[data-audit-found]")).to_contain_text("the 1 job matching")
    expect(page.locator("tr[data-event]")).to_have_count(1)
    expect(page.locator("tr[data-event]")).to_contain_text("receipt-007")
    for width in (1400, 390):
        page.set_viewport_size({"width": width, "height": 900})
        assert_no_serious_violations(page, f"audit-search-{width}")
        _fits(page, width)


def test_the_last_hour_per_minute_and_the_providers_pass_axe(live_server, browser, log_in, operator):
    from datetime import timedelta

    from django.utils import timezone

    from ledger.models import LedgerEvent
    from reconciliation.models import ProviderState
    from tests.browser.axe import assert_no_serious_violations

    job = make_job("busy-1")
    for minutes in (1, 2, 2, 7, 30):
        LedgerEvent.objects.create(job=job, at=timezone.now() - timedelta(minutes=minutes), actor_type="worker",
                                   actor="w", kind="claimed")
    ProviderState.objects.create(provider="mail", process="host:1", state="ok", calls_last_minute=30,
                                 updated_at=timezone.now())
    page = log_in(browser, operator)
    page.goto(f"{live_server.url}/")
    page.get_by_role("link", name="last hour, per minute").click()
    expect(page.locator("#overview-charts")).to_have_attribute("data-window", "1h")
    expect(page.locator('[data-provider="mail"]')).to_contain_text("30 in the last minute")
    for width in (1400, 390):
        page.set_viewport_size({"width": width, "height": 900})
        assert_no_serious_violations(page, f"overview-last-hour-{width}")
        _fits(page, width)
