"""Triage at 3 a.m. in a real browser: a blocked job's way out (re-check identity, replay, cancel
with an in-page "are you sure?", with and without JavaScript), and a decision by keyboard alone.
Each path counts its clicks from the overview to the resolved job."""

import pytest
from playwright.sync_api import expect

from ledger import runtime
from ledger.models import Job
from tests.conftest import make_job
from tests.console.conftest import make_operator_job, make_unknown_job

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

BINDING = {"profile": "p1", "account": "acme-social"}


def _profile(sandbox, account):
    status, _, body = sandbox.request("PUT", "/_admin/profiles/p1", {"account": account, "session": "active"})
    assert status == 200, body


def _blocked_post(provider, job_id):
    make_job(job_id, action="social.publish_post", payload={"body": "Launch!"}, identity=BINDING)
    assert runtime.run_job(job_id, worker="w") == "blocked"


class Clicks:
    """Clicks an operator makes (typing a note is not one)."""

    def __init__(self):
        self.count = 0

    def __call__(self, locator):
        self.count += 1
        locator.click()


def test_a_blocked_job_is_re_checked_and_replayed_once_the_login_is_fixed(
    live_server, browser, log_in, operator, provider, artifacts
):
    _profile(provider, "someone-else")
    _blocked_post(provider, "post-1")
    page = log_in(browser, operator)
    click = Clicks()
    click(page.get_by_role("link", name="Blocked, nothing sent"))
    row = page.locator('tr[data-job="post-1"]')
    expect(row.locator("[data-reason]")).to_contain_text(
        "identity mismatch: account expected 'acme-social', seen 'someone-else'")
    page.screenshot(path=artifacts / "triage-blocked-queue.png", full_page=True)
    click(row.get_by_role("link", name="post-1"))
    expect(page.get_by_role("button", name="Mark not found")).to_have_count(0)
    expect(page.get_by_role("button", name="Replay")).to_have_count(0)
    expect(page.locator("[data-guide]")).to_contain_text("Log into the profile named in the job's identity binding")

    _profile(provider, "acme-social")  # someone fixes the worker's login
    page.get_by_label("Note").fill("Logged the profile back into acme-social")
    click(page.get_by_role("button", name="Re-check identity"))
    expect(page.locator("#decision-result")).to_be_focused()
    expect(page.locator("#decision-panel .triage")).to_contain_text("the binding matches now")
    page.get_by_label("Note").fill("Binding matches; nothing was sent before")
    click(page.get_by_role("button", name="Replay"))
    expect(page.locator("#decision-result .notice-success")).to_contain_text("Replay: recorded.")
    expect(page.locator("[data-job-status]")).to_have_text("pending")
    page.screenshot(path=artifacts / "triage-blocked-replayed.png", full_page=True)
    assert click.count == 4  # overview → blocked tab → job → re-check → replay
    assert runtime.run_job("post-1", worker="w") == "succeeded"
    assert provider.effects(marker="social.publish_post:post-1")["count"] == 1


def test_cancelling_a_blocked_job_asks_in_the_page_first(live_server, browser, log_in, operator, provider):
    _profile(provider, "someone-else")
    _blocked_post(provider, "post-2")
    page = log_in(browser, operator)
    click = Clicks()
    click(page.get_by_role("link", name="Blocked, nothing sent"))
    click(page.locator('tr[data-job="post-2"]').get_by_role("link", name="post-2"))
    page.get_by_label("Note").fill("Campaign withdrawn")
    click(page.get_by_role("button", name="Cancel job"))
    question = page.locator("#confirm-question")
    expect(question).to_be_focused()
    expect(question).to_contain_text("Cancel job: are you sure?")
    assert Job.objects.get(job_id="post-2").status == "blocked"  # asking changed nothing
    click(page.get_by_role("button", name="Yes, cancel job"))
    expect(page.locator("#decision-result .notice-success")).to_contain_text("Cancel job: recorded.")
    expect(page.locator("[data-job-status]")).to_have_text("cancelled")
    assert click.count == 4  # overview → blocked tab → job → cancel → yes
    assert Job.objects.get(job_id="post-2").status == "cancelled"


def test_the_confirmation_works_with_javascript_off(live_server, browser, operator, provider):
    _profile(provider, "someone-else")
    _blocked_post(provider, "post-3")
    context = browser.new_context(java_script_enabled=False)
    try:
        page = context.new_page()
        page.goto(f"{live_server.url}/accounts/login/")
        page.get_by_label("Username").fill(operator.username)
        page.get_by_label("Password").fill(f"pw-{operator.username}")
        page.get_by_role("button", name="Log in").click()
        page.goto(f"{live_server.url}/jobs/post-3/")
        page.get_by_label("Note").fill("Withdrawn, no JS here")
        page.get_by_role("button", name="Cancel job").click()
        expect(page.locator("#confirm-question")).to_contain_text("Cancel job: are you sure?")
        assert Job.objects.get(job_id="post-3").status == "blocked"
        page.get_by_role("button", name="Yes, cancel job").click()
        expect(page.locator("#decision-result")).to_contain_text("Cancel job: recorded.")
        expect(page.locator("[data-job-status]")).to_have_text("cancelled")
    finally:
        context.close()


def test_an_unknown_job_is_resolved_by_keyboard_alone(live_server, browser, log_in, operator, artifacts):
    make_operator_job("vault-1")
    make_operator_job("vault-2")
    page = log_in(browser, operator)
    click = Clicks()
    click(page.get_by_role("link", name="Needs a human"))  # the only click; the rest is keys
    page.wait_for_url(f"{live_server.url}/queue/?tab=human")
    page.keyboard.press("?")
    expect(page.locator("#shortcuts")).to_have_attribute("open", "")
    page.keyboard.press("Escape")
    page.keyboard.press("j")
    expect(page.locator('tr[data-job="vault-1"] th a')).to_be_focused()
    page.keyboard.press("o")
    page.wait_for_url(f"{live_server.url}/jobs/vault-1/?tab=human")  # the list it came from
    # The decision panel comes first: past "Skip to content", Tab reaches the note first.
    page.keyboard.press("Tab")
    expect(page.get_by_role("link", name="Skip to content")).to_be_focused()
    page.keyboard.press("Enter")
    page.keyboard.press("Tab")
    expect(page.get_by_label("Note")).to_be_focused()
    page.keyboard.type("Vault audit log shows the rotation at 03:12")
    page.keyboard.press("Escape")  # leave the note; a key decides now
    page.keyboard.press("c")
    expect(page.locator("#decision-result")).to_be_focused()
    expect(page.locator("#decision-result .notice-success")).to_contain_text("Confirm effect: recorded.")
    page.keyboard.press("Tab")
    expect(page.get_by_role("link", name="Next job in the list →")).to_be_focused()
    page.screenshot(path=artifacts / "triage-keyboard-decided.png", full_page=True)
    page.keyboard.press("Enter")
    page.wait_for_url(f"{live_server.url}/jobs/vault-2/?tab=human")
    assert click.count == 1 and Job.objects.get(job_id="vault-1").status == "succeeded"


def test_an_unknown_job_is_three_clicks_from_the_overview(live_server, browser, log_in, operator):
    make_unknown_job("inv-1")
    make_operator_job("vault-1")
    page = log_in(browser, operator)
    click = Clicks()
    click(page.get_by_role("link", name="Needs a human"))
    expect(page.locator('tr[data-job="vault-1"] [data-reason]')).to_contain_text("cannot be queried")
    click(page.locator('tr[data-job="vault-1"]').get_by_role("link", name="vault-1"))
    page.get_by_label("Note").fill("Vault audit log: rotated at 03:12")
    click(page.get_by_role("button", name="Confirm effect"))
    expect(page.locator("[data-job-status]")).to_have_text("succeeded")
    assert click.count == 3  # overview → needs a human → job → confirm
