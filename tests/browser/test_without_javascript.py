"""JavaScript off: every read page shows its content and every form works as a plain HTML form
(htmx only enhances them)."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from approvals.models import ApprovalRequest
from console.selectors.queue import TABS
from ledger.models import Job
from ledger.states import UNKNOWN_WORK
from tests.browser.scenario import populate

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def _log_in(browser, base: str, user):
    context = browser.new_context(java_script_enabled=False, viewport={"width": 1440, "height": 900})
    page = context.new_page()
    page.goto(f"{base}/accounts/login/")
    page.get_by_label("Username").fill(user.username)
    page.get_by_label("Password").fill(f"pw-{user.username}")
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"{base}/")
    # Playwright's own evaluation still works; the page's scripts did not run.
    assert page.evaluate("typeof window.htmx") == "undefined"
    return context, page


def test_every_read_page_shows_its_content_without_javascript(live_server, browser, operator, approver):
    jobs = populate(operator, approver)
    base = live_server.url
    context, page = _log_in(browser, base, operator)
    try:
        # Unknown work leaves out blocked jobs: they sent nothing (counted apart).
        unknown = Job.objects.filter(status__in=UNKNOWN_WORK).exclude(status="blocked").count()
        expect(page.locator('[data-figure="unknown_total"]')).to_have_text(str(unknown))
        page.goto(f"{base}/queue/")
        expect(page.locator('tr[data-job="rot-operator"]')).to_be_visible()
        human = Job.objects.filter(status__in=TABS["human"][1]).count()  # blocked jobs have a tab of their own
        expect(page.locator('[data-tab-count="human"]')).to_have_text(str(human))
        page.goto(f"{base}/queue/?tab=reconciling")
        expect(page.locator('tr[data-job="inv-unknown"]')).to_be_visible()
        for job_id in jobs.values():
            page.goto(f"{base}/jobs/{job_id}/")
            status = Job.objects.get(job_id=job_id).status
            expect(page.locator("[data-job-status]")).to_have_text(status)
            expect(page.locator("#attempts tbody tr").first).to_be_visible()
            expect(page.locator("#timeline > ol > li").first).to_be_visible()  # earlier attempts are folded
            expect(page.get_by_role("link", name="Back to the queue")).to_be_visible()
        page.goto(f"{base}/approvals/")
        pending = ApprovalRequest.objects.get(job__job_id="rot-approval")
        expect(page.locator(f'[data-approval="{pending.pk}"]')).to_contain_text("rot-approval")
        page.goto(f"{base}/audit/")
        expect(page.locator("#audit-table > table tbody tr").first).to_be_visible()
    finally:
        context.close()


def test_every_form_works_without_javascript(live_server, browser, operator, approver):
    populate(operator, approver)
    base = live_server.url
    context, page = _log_in(browser, base, operator)
    try:
        # Queue filters: a GET form.
        page.goto(f"{base}/queue/?tab=reconciling")
        page.get_by_label("Job id, key or marker").fill("inv-unknown")
        page.get_by_role("button", name="Filter").click()
        expect(page).to_have_url(f"{base}/queue/?tab=reconciling&status=&action=&tenant=&older_than=&q=inv-unknown"
                                 "&sort=oldest&size=50")
        expect(page.locator("tbody tr[data-job]")).to_have_count(1)

        # Bulk decision: a POST form, answered with a redirect and a message.
        page.get_by_label("Select inv-unknown").check()
        page.get_by_label("Note", exact=True).fill("Customer withdrew the order by phone")
        page.get_by_role("button", name="Cancel job").click()
        page.get_by_role("button", name="Yes, cancel job for 1 job").click()  # asked again, by the server
        expect(page.locator("ul.messages")).to_contain_text("inv-unknown: Cancel job recorded")
        assert Job.objects.get(job_id="inv-unknown").status == "cancelled"

        # A decision on the job page.
        page.goto(f"{base}/jobs/rot-operator/")
        page.get_by_label("Note").fill("Vault audit log shows no rotation at that time")
        page.get_by_role("button", name="Mark not found").click()
        expect(page).to_have_url(f"{base}/jobs/rot-operator/?tab=human")  # the list it is in, kept
        expect(page.locator("#decision-panel .notice-success")).to_contain_text("Mark not found: recorded.")
        expect(page.locator("[data-job-status]")).to_have_text("awaiting_approval")

        # The audit's filters.
        page.goto(f"{base}/audit/")
        page.get_by_label("Job id").fill("rot-operator")
        page.get_by_role("button", name="Search").click()
        expect(page.locator("#audit-table > table tbody")).to_contain_text("operator_marked_not_found")
        expect(page.locator("#audit-table > table tbody")).not_to_contain_text("inv-unknown")

        page.get_by_role("button", name="Log out").click()
        expect(page).to_have_url(f"{base}/accounts/login/")
    finally:
        context.close()

    # The approver decides on the request the operator just made.
    context, page = _log_in(browser, base, approver)
    try:
        request = ApprovalRequest.objects.get(job__job_id="rot-operator")
        page.goto(f"{base}/approvals/")
        card = page.locator(f'[data-approval="{request.pk}"]')
        card.get_by_label("Note").fill("The vault log shows a rotation at 03:12: no replay")
        card.get_by_role("button", name="Reject").click()
        expect(page).to_have_url(f"{base}/approvals/")
        expect(page.locator("ul.messages")).to_contain_text("Replay of rot-operator rejected.")
        request.refresh_from_db()
        assert request.status == "rejected" and request.decided_by == approver
    finally:
        context.close()
