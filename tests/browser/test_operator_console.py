"""An operator and an approver at work in a real browser, against a live server."""

import pytest
from django.contrib.auth.models import Group
from playwright.sync_api import expect

from approvals.models import ApprovalRequest
from ledger.models import Job
from tests.conftest import sandbox_env
from tests.console.conftest import make_operator_job, make_unknown_job
from tests.processes import qcluster, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_an_operator_confirms_an_unknown_effect_and_it_leaves_the_queue(
    live_server, browser, log_in, operator, artifacts
):
    make_unknown_job("inv-7")
    make_unknown_job("inv-8")
    page = log_in(browser, operator)
    page.get_by_role("navigation", name="Console").get_by_role("link", name="Queue").click()
    page.get_by_role("link", name="Reconciling").click()
    row = page.locator('tr[data-job="inv-7"]')
    expect(row).to_contain_text("needs_reconciliation")
    page.screenshot(path=artifacts / "queue.png", full_page=True)

    row.get_by_role("link", name="inv-7").click()
    expect(page.get_by_role("heading", name="Decision")).to_be_visible()
    # The queue's tabs are the queue's: the job page links back to the tab the job is listed in.
    expect(page.locator("[data-back-to-queue]")).to_have_attribute("href", "/queue/?tab=reconciling")
    expect(page.locator('[data-tab-count="reconciling"]')).to_have_count(0)
    page.get_by_label("Note").fill("Invoice in_123 is in the provider's dashboard with our key")
    page.get_by_role("button", name="Confirm effect").click()
    expect(page.locator("#decision-panel .notice-success")).to_contain_text("Confirm effect: recorded.")
    expect(page.locator("[data-job-status]")).to_have_text("succeeded")  # swapped out of band
    expect(page.locator('#timeline [data-kind="operator_confirmed_effect"]')).to_contain_text(
        "Invoice in_123 is in the provider's dashboard"
    )
    page.screenshot(path=artifacts / "job.png", full_page=True)
    assert Job.objects.get(job_id="inv-7").status == "succeeded"

    page.get_by_role("navigation", name="Console").get_by_role("link", name="Queue").click()
    page.get_by_role("link", name="Reconciling").click()
    expect(page.locator('[data-tab-count="reconciling"]')).to_have_text("1")
    expect(page.locator('tr[data-job="inv-8"]')).to_be_visible()
    expect(page.locator('tr[data-job="inv-7"]')).to_have_count(0)


def test_an_irreversible_replay_needs_a_second_person_then_runs_against_the_sandbox(
    live_server, browser, log_in, operator, approver, provider, settings, artifacts
):
    settings.RECKON_DISPATCH = True
    operator.groups.add(Group.objects.get_or_create(name="approvers")[0])  # may approve, but not their own
    make_operator_job("rot-1", payload={"name": "db-primary"})
    assert provider.effects(marker="vault.rotate_credential:rot-1")["count"] == 0

    page = log_in(browser, operator)
    page.goto(f"{live_server.url}/queue/")
    page.locator('tr[data-job="rot-1"]').get_by_role("link", name="rot-1").click()
    expect(page.get_by_text("an approver must approve the replay")).to_be_visible()
    page.get_by_label("Note").fill("Vault audit log shows no rotation at that time")
    page.get_by_role("button", name="Mark not found").click()
    expect(page.locator("[data-job-status]")).to_have_text("awaiting_approval")

    # the requester sees the request, is told why they cannot decide, and the buttons are off
    page.get_by_role("navigation", name="Console").get_by_role("link", name="Approvals").click()
    request = ApprovalRequest.objects.get(job__job_id="rot-1")
    card = page.locator(f'[data-approval="{request.pk}"]')
    expect(card.locator("[data-own-request]")).to_contain_text("another approver must decide")
    expect(card.get_by_role("button", name="Approve replay")).to_be_disabled()

    approver_page = log_in(browser, approver)
    approver_page.goto(f"{live_server.url}/approvals/")
    card = approver_page.locator(f'[data-approval="{request.pk}"]')
    expect(card).to_contain_text(request.payload_digest)
    card.get_by_label("Note").fill("Checked the vault audit log myself: safe to rotate once")
    with qcluster(workers=1, env=sandbox_env(provider)) as cluster:
        card.get_by_role("button", name="Approve replay").click()
        expect(approver_page.locator("#approval-list .notice-success")).to_contain_text("Replay of rot-1 approved.")
        wait_for(
            lambda: Job.objects.get(job_id="rot-1").status == "succeeded",
            timeout=60,
            message=f"the approved replay to succeed\n{cluster.output()[-2000:]}",
        )

    approver_page.goto(f"{live_server.url}/jobs/rot-1/")
    expect(approver_page.locator("[data-job-status]")).to_have_text("succeeded")
    expect(approver_page.locator('tr[data-attempt="2"]')).to_contain_text("confirmed")
    assert provider.effects(marker="vault.rotate_credential:rot-1")["count"] == 1
    request.refresh_from_db()
    assert request.status == "approved" and request.decided_by == approver


def test_a_superuser_narrows_an_operators_tenants_in_admin_and_the_audit_shows_it(
    live_server, browser, log_in, operator, admin_user
):
    make_unknown_job("inv-acme", tenant="acme")
    make_unknown_job("inv-globex", tenant="globex")
    page = log_in(browser, operator)
    page.goto(f"{live_server.url}/queue/?tab=reconciling")
    expect(page.locator('tr[data-job="inv-globex"]')).to_be_visible()
    expect(page.locator("[data-tenants]")).to_have_text("(all tenants)")

    admin = log_in(browser, admin_user)
    admin.goto(f"{live_server.url}/admin/auth/user/{operator.pk}/change/")
    admin.locator("#id_tenant_scope-0-all_tenants").uncheck()
    admin.locator("#id_tenant_scope-0-tenants").fill("acme")
    admin.locator('input[name="_save"]').click()
    expect(admin.locator(".messagelist")).to_contain_text("was changed successfully")

    page.reload()
    expect(page.locator('tr[data-job="inv-acme"]')).to_be_visible()
    expect(page.locator('tr[data-job="inv-globex"]')).to_have_count(0)
    expect(page.locator("[data-tenants]")).to_have_text("(acme)")
    assert page.goto(f"{live_server.url}/jobs/inv-globex/").status == 404

    admin.goto(f"{live_server.url}/audit/")
    trail = admin.locator("#admin-trail")
    expect(trail.locator("tbody tr").first).to_contain_text(operator.username)
    expect(trail.locator("tbody tr").first).to_contain_text('tenant_scope: "all tenants" → "acme"')


def test_releasing_a_colleagues_hold_asks_first_in_the_browser(live_server, browser, log_in):
    from ledger.services import take_job
    from tests.conftest import _persona
    from tests.console.conftest import with_tenants

    make_operator_job("vault-1")
    take_job(job_id="vault-1", holder="olga")
    page = log_in(browser, with_tenants(_persona("otto", "operators")))
    page.goto(f"{live_server.url}/jobs/vault-1/")
    page.get_by_role("button", name="Release olga's hold…").click()
    question = page.locator("[data-confirm-release]")
    expect(question).to_contain_text("Release olga's hold: are you sure?")
    expect(page.locator("#decision-panel .notice-warning")).to_contain_text("olga has been on this job since")
    assert Job.objects.get(job_id="vault-1").holder == "olga"  # the first click only asked
    question.get_by_role("button", name="Yes, release olga's hold").click()
    expect(page.locator("#decision-panel .notice-success")).to_contain_text("Released: nobody is on this job now.")
    expect(page.locator("[data-holder-none]")).to_be_visible()
    assert Job.objects.get(job_id="vault-1").holder == ""
