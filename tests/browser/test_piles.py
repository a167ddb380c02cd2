"""The piles an incident leaves, in the browser: bulk confirm on a filter and bulk approve on a
filter, each with refusals among them (four eyes per job); next-in-list with a filter; a hold that
shows its reason; my shift; dense job ids. axe runs on every new state at 1440 px and at 390 px."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import Group
from playwright.sync_api import expect

from approvals.models import ApprovalRequest
from ledger.models import Job
from ledger.services import comment_on_job, take_job
from reconciliation import decisions
from tests.browser.axe import assert_no_serious_violations
from tests.conftest import _persona
from tests.console.conftest import latest_version, make_operator_job, make_unknown_job, with_tenants

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

WIDTHS = ((1440, 900), (390, 844))
SEEN = "vault effect log 14:02-14:10: every rotation applied"


def _axe_at_both_widths(page, name: str) -> None:
    for width, height in WIDTHS:
        page.set_viewport_size({"width": width, "height": height})
        assert_no_serious_violations(page, f"piles-{name}-{width}")
    page.set_viewport_size({"width": 1400, "height": 900})


@pytest.fixture
def asker():
    """A colleague who marked replays not found: an approver and an operator."""
    person = with_tenants(_persona("ada", "approvers"))
    person.groups.add(Group.objects.get_or_create(name="operators")[0])
    return person


def test_confirming_every_vault_job_of_a_filter_refuses_the_one_awaiting_approval(
        live_server, browser, log_in, operator, asker):
    for n in range(1, 5):
        make_operator_job(f"vault-{n}")
    make_unknown_job("inv-1")  # another action: the filter leaves it out
    decisions.mark_not_found(job_id="vault-4", version=latest_version("vault-4"), user=asker, note="none")
    page = log_in(browser, operator)
    page.goto(f"{live_server.url}/queue/?tab=human&action=vault.rotate_credential")
    page.get_by_label("Select all 4 jobs matching this filter, not only this page").check()
    page.locator("#bulk-note").fill("the provider's effect log shows them applied")
    page.locator("#bulk-evidence").fill(SEEN)
    page.locator("#bulk-form").get_by_role("button", name="Confirm effect").click()
    expect(page.get_by_role("heading", name="Confirm effect for all 4 jobs matching this filter?")).to_be_visible()
    expect(page.locator("[data-confirm-evidence]")).to_contain_text(SEEN)
    _axe_at_both_widths(page, "queue-bulk-confirm-question")
    page.get_by_role("button", name="Yes, confirm effect for 4 jobs").click()
    expect(page.locator("#run-title")).to_have_text("Done: 4 of 4 jobs")
    expect(page.locator("[data-succeeded]")).to_have_text("3")
    expect(page.locator('[data-refused-job="vault-4"]')).to_contain_text("only an unknown attempt can be confirmed")
    _axe_at_both_widths(page, "queue-bulk-confirm-done")
    assert dict(Job.objects.filter(job_id__startswith="vault-").values_list("job_id", "status")) == {
        "vault-1": "succeeded", "vault-2": "succeeded", "vault-3": "succeeded", "vault-4": "awaiting_approval"}


def test_approving_a_filtered_pile_refuses_four_eyes_and_dissent(live_server, browser, log_in, approver, asker):
    approver.groups.add(Group.objects.get_or_create(name="operators")[0])
    for n in range(1, 4):
        make_operator_job(f"vault-{n}")
        decisions.mark_not_found(job_id=f"vault-{n}", version=latest_version(f"vault-{n}"), user=asker, note="none")
    make_operator_job("vault-mine")
    decisions.mark_not_found(job_id="vault-mine", version=latest_version("vault-mine"), user=approver, note="none")
    comment_on_job(job_id="vault-3", author="olga", actor_type="operator", text="rotated at 14:02: do not replay")
    make_operator_job("globex-1", tenant="globex")
    decisions.mark_not_found(job_id="globex-1", version=latest_version("globex-1"), user=asker, note="none")

    page = log_in(browser, approver)
    page.goto(f"{live_server.url}/approvals/")
    page.get_by_label("Tenant").fill("acme")
    page.get_by_label("Tenant").press("Enter")
    page.wait_for_url(re.compile(r"tenant=acme"))
    page.get_by_label("Order").select_option("dissent")
    page.wait_for_url(re.compile(r"tenant=acme.*sort=dissent"))
    first = page.locator("article.approval").first
    expect(first.locator("[data-dissent]")).to_contain_text("Dissent: 1 comment by olga")
    expect(page.locator("[data-pending-count]")).to_have_text("4")
    expect(first.locator("[data-digest]")).to_have_text(re.compile(r"^[0-9a-f]{64}$"))
    _axe_at_both_widths(page, "approvals-filtered-dissent-first")
    page.locator("[data-select-all-requests]").check()
    page.locator("#approvals-bulk-note").fill("the vault log shows none of these applied")
    page.locator("#approvals-bulk").get_by_role("button", name="Approve replay").click()
    expect(page.locator("[data-confirm-question]")).to_contain_text("Approve replay for 4 requests: are you sure?")
    _axe_at_both_widths(page, "approvals-bulk-question")
    page.locator("[data-confirm-yes]").click()
    expect(page.locator("[data-bulk-notice]")).to_have_text("Approve replay: 2 recorded, 2 refused, each on its own.")
    outcomes = page.locator("[data-bulk-outcomes]")
    expect(outcomes).to_contain_text("four eyes: abe requested this approval")
    expect(outcomes).to_contain_text("olga commented on this job")
    _axe_at_both_widths(page, "approvals-bulk-outcomes")
    assert dict(ApprovalRequest.objects.values_list("job__job_id", "status")) == {
        "vault-1": "approved", "vault-2": "approved", "vault-3": "pending", "vault-mine": "pending",
        "globex-1": "pending"}


def test_next_goes_down_the_filtered_list_and_u_goes_back_to_it(live_server, browser, log_in, operator, asker):
    make_operator_job("vault-1")
    make_operator_job("vault-2")  # awaiting approval: an operator can do nothing there
    make_operator_job("vault-3", tenant="globex")
    make_operator_job("vault-4")
    decisions.mark_not_found(job_id="vault-2", version=latest_version("vault-2"), user=asker, note="none")
    page = log_in(browser, operator)
    page.goto(f"{live_server.url}/queue/?tab=human&tenant=acme")
    page.locator('tr[data-job="vault-1"] th a').click()
    page.wait_for_url(re.compile(r"/jobs/vault-1/\?tab=human&tenant=acme$"))
    _axe_at_both_widths(page, "job-from-a-filtered-list")
    page.locator("body").press("]")
    page.wait_for_url(re.compile(r"/jobs/vault-4/\?tab=human&tenant=acme$"))
    expect(page.locator("[data-next-job]")).to_have_text("End of the list: open the queue")
    page.locator("body").press("u")
    page.wait_for_url(re.compile(r"/queue/\?tab=human&tenant=acme$"))
    expect(page.get_by_label("Tenant")).to_have_value("acme")


def test_a_hold_shows_its_reason_and_the_last_comment_and_my_shift_lists_it(
        live_server, browser, log_in, operator):
    long_id = "sim-20261203-170000-00042"  # as the demo's workload names its jobs
    make_operator_job(long_id)
    page = log_in(browser, operator)
    page.goto(f"{live_server.url}/jobs/{long_id}/")
    page.get_by_label("What you are doing").fill("waiting for the vault team's answer (INC-88)")
    page.get_by_role("button", name="I'm on it").click()
    expect(page.locator("#decision-panel [data-hold-reason]")).to_have_text("waiting for the vault team's answer (INC-88)")
    page.get_by_label("Your comment").fill("asked on #vault at 14:05")
    page.get_by_role("button", name="Add comment").click()
    expect(page.locator("[data-comment-notice]")).to_have_text("Comment added to the job's history.")
    page.goto(f"{live_server.url}/queue/")
    row = page.locator(f'tr[data-job="{long_id}"]')
    expect(row.locator("[data-hold-reason]")).to_have_text("waiting for the vault team's answer (INC-88)")
    expect(row.locator("[data-last-comment]")).to_contain_text("asked on #vault at 14:05")
    page.set_viewport_size({"width": 1440, "height": 900})
    lines = row.locator("th a.job-id").evaluate("a => a.getClientRects().length")
    assert lines <= 2, f"the job id wraps into {lines} lines at 1440 px"
    _axe_at_both_widths(page, "queue-hold-reason-last-comment")
    page.locator("header nav").get_by_role("link", name="My shift").click()
    expect(page.locator('[data-shift-count="held"]')).to_have_text("1")
    expect(page.locator('[data-shift-count="commented"]')).to_have_text("1")
    expect(page.locator("[data-shift-holding]")).to_contain_text(long_id)
    _axe_at_both_widths(page, "my-shift")
    take_job(job_id=long_id, holder=operator.username)  # still on it until the sign-out
    page.get_by_role("button", name="Log out").click()
    page.wait_for_url(re.compile(r"/accounts/"))
    assert Job.objects.get(job_id=long_id).holder == ""


def test_the_overview_draws_the_minute_in_progress_apart_and_remembers_it(live_server, browser, log_in, operator):
    make_unknown_job("inv-1")
    page = log_in(browser, operator)
    page.get_by_role("link", name="last hour, per minute").click()
    expect(page.locator('#overview-charts[data-window="1h"]')).to_be_visible()
    expect(page.locator('[data-chart="throughput"] .mark.partial')).to_have_count(2)  # claimed and succeeded
    _axe_at_both_widths(page, "overview-1h-in-progress")
    page.goto(f"{live_server.url}/")
    expect(page.locator('#overview-charts[data-window="1h"]')).to_be_visible()
