"""Handing a shift over, in the browser: a colleague's comment reaches the approver before the
replay is approved, approvers see what waits for them in the navigation, earlier attempts are
folded away on the job page, an unknown queue status is said, and a lease owner stays readable.
axe runs on each page state at 1440 px and at 390 px."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from playwright.sync_api import expect

from approvals.models import ApprovalRequest
from ledger import services
from reconciliation import decisions
from tests.browser.axe import assert_no_serious_violations
from tests.conftest import _persona, make_job
from tests.console.conftest import latest_version, make_operator_job, with_tenants

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

WIDTHS = ((1440, 900), (390, 844))


def _axe_at_both_widths(page, name: str) -> None:
    for width, height in WIDTHS:
        page.set_viewport_size({"width": width, "height": height})
        assert_no_serious_violations(page, f"handover-{name}-{width}")
    page.set_viewport_size({"width": 1400, "height": 900})


def test_the_approver_reads_a_colleagues_comment_before_approving(live_server, browser, log_in, operator, approver):
    asker = with_tenants(_persona("ada", "approvers"))
    asker.groups.add(Group.objects.get_or_create(name="operators")[0])
    make_operator_job("rot-9")
    decisions.mark_not_found(job_id="rot-9", version=latest_version("rot-9"), user=asker, note="vault shows nothing")
    request = ApprovalRequest.objects.get(job__job_id="rot-9")

    page = log_in(browser, operator)
    page.goto(f"{live_server.url}/jobs/rot-9/")
    page.get_by_label("Your comment").fill("The vault's own log shows a rotation at 03:12 — I would not replay")
    page.get_by_role("button", name="Add comment").click()
    expect(page.locator("[data-comment-notice]")).to_have_text("Comment added to the job's history.")
    expect(page.locator('#timeline li[data-kind="job_commented"] .note')).to_have_text(
        "The vault's own log shows a rotation at 03:12 — I would not replay")
    expect(page.get_by_label("Your comment")).to_have_value("")
    _axe_at_both_widths(page, "job-commented")

    approver_page = log_in(browser, approver)
    badge = approver_page.locator("header nav [data-approvals-waiting]")
    expect(badge).to_have_text("1 waiting for you")
    approver_page.locator("header nav").get_by_role("link", name="Approvals").click()
    card = approver_page.locator(f'[data-approval="{request.pk}"]')
    expect(card.get_by_role("heading", level=3)).to_contain_text("Replay of rot-9")
    comment = card.locator("blockquote.comment")
    expect(comment).to_contain_text("I would not replay")
    expect(comment).to_contain_text(operator.username)
    # The comment is read before the decision: it comes before the form in the card.
    assert comment.evaluate("c => !!(c.compareDocumentPosition(c.closest('article').querySelector('form')) & 4)")
    _axe_at_both_widths(approver_page, "approvals-with-comment")
    card.get_by_label("Note").fill("Colleague saw a rotation: rejected")
    card.get_by_role("button", name="Reject").click()
    expect(approver_page.locator("#approval-list .notice-success")).to_have_text("Replay of rot-9 rejected.")
    expect(badge).to_have_count(0)  # the header's badge follows the decision made in place


def test_earlier_attempts_are_folded_away(live_server, browser, log_in, operator):
    make_job("echo-3", action="reckon.echo")
    for worker in ("w1", "w2"):
        lease = services.claim_job(job_id="echo-3", worker=worker)
        services.record_failure(lease=lease, error=f"{worker}: provider busy, retry", retryable=True)
    page = log_in(browser, operator)
    page.goto(f"{live_server.url}/jobs/echo-3/")
    folded = page.locator("details[data-earlier-events]")
    summary = page.locator("details[data-earlier-events] > summary")
    expect(summary).to_contain_text("before attempt #3")
    first_claim = folded.locator('li[data-kind="claimed"]').first
    expect(first_claim).to_be_hidden()
    expect(page.locator('#timeline > ol li[data-kind="attempt_opened"]')).to_be_visible()
    _axe_at_both_widths(page, "timeline-folded")
    summary.click()
    expect(first_claim).to_be_visible()
    _axe_at_both_widths(page, "timeline-unfolded")


def test_an_unknown_status_says_so(live_server, browser, log_in, operator):
    make_operator_job("rot-1")
    page = log_in(browser, operator)
    page.goto(f"{live_server.url}/queue/?tab=human&status=needs_coffee")
    expect(page.get_by_role("alert")).to_contain_text("There is no status “needs_coffee” in this tab")
    expect(page.locator("tr[data-job]")).to_have_count(0)
    _axe_at_both_widths(page, "queue-unknown-status")
    page.get_by_role("link", name="list them all").click()
    expect(page.locator('tr[data-job="rot-1"]')).to_be_visible()


def test_a_long_lease_owner_keeps_a_readable_width(live_server, browser, log_in, operator):
    owner_name = "reckon-qcluster-host-a-pid-48213-worker-2 [token ops-fleet 3f9a2c]"
    make_job("echo-1", action="reckon.echo")
    lease = services.claim_job(job_id="echo-1", worker=owner_name)
    services.begin_side_effect(lease=lease, sent_to="https://api.billing.example.com/v1/invoices/acct_1234567890")
    services.record_failure(lease=lease, retryable=True, error="provider answered 422: the invoice's customer "
                            "cus_1234567890 has no default payment method and the currency EUR is not enabled")
    services.claim_job(job_id="echo-1", worker=owner_name)
    page = log_in(browser, operator)
    page.goto(f"{live_server.url}/jobs/echo-1/")
    owner = page.locator('tr[data-attempt="2"] td[data-label="Lease owner"] code')
    squeezed = {}
    for width in (390, *range(700, 1500, 100)):
        page.set_viewport_size({"width": width, "height": 900})
        lines, wide = owner.evaluate("c => [c.getClientRects().length, c.getBoundingClientRect().width]")
        if wide < 150 or lines > 5:  # about 20 characters a line at least, never a column of letters
            squeezed[width] = (lines, round(wide))
    assert not squeezed, f"the lease owner is squeezed (lines, px wide) at: {squeezed}"
