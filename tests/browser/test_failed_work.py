"""Every state has a way out, in a real browser: from "failed N" on the overview to the failed tab
to a retry with a corrected payload (a refused edit first, explained and kept), and a blocked batch
re-checked and replayed on a filter once the profile's login is fixed. axe runs on each new page
state at 1440 px and at 390 px; at 390 px nothing scrolls sideways."""

import re

import pytest
from playwright.sync_api import expect

from ledger import runtime
from ledger.models import Job, LedgerEvent
from tests.browser.axe import check, summary
from tests.browser.test_triage import BINDING, Clicks, _blocked_post, _profile
from tests.conftest import make_job

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

WIDE, NARROW = 1440, 390
OVERFLOW = "() => document.documentElement.scrollWidth - document.documentElement.clientWidth"


class Audit:
    """axe (and, at 390 px, sideways scrolling) on page states, at both widths; failures gathered."""

    def __init__(self, page):
        self.page, self.serious, self.overflow = page, {}, {}

    def __call__(self, name: str) -> None:
        for width, height in ((WIDE, 900), (NARROW, 844)):
            self.page.set_viewport_size({"width": width, "height": height})
            self.serious[f"{name}-{width}"] = check(self.page, f"failed-work-{name}-{width}")
            if width == NARROW and self.page.evaluate(OVERFLOW) > 1:
                self.overflow[name] = self.page.evaluate(OVERFLOW)
        self.page.set_viewport_size({"width": WIDE, "height": 900})

    def assert_clean(self) -> None:
        failing = {name: found for name, found in self.serious.items() if found}
        assert not failing, "\n".join(f"{name}:\n{summary(found)}" for name, found in failing.items())
        assert not self.overflow, f"pages that scroll sideways at {NARROW} px: {self.overflow}"


def test_a_failed_job_is_retried_with_a_corrected_payload_from_the_failed_tab(
    live_server, browser, log_in, operator, artifacts
):
    make_job("mail-7", payload={"to": "ann@@example", "subject": "Your invoice", "fail": "400: malformed address"})
    assert runtime.run_job("mail-7", worker="w") == "failed"
    page = log_in(browser, operator)
    audit, click = Audit(page), Clicks()

    click(page.locator("[data-failed-link]"))
    expect(page.locator('[data-tab-count="failed"]')).to_have_text("1")
    row = page.locator('tr[data-job="mail-7"]')
    expect(row.locator("[data-reason]")).to_contain_text("failed: 400: malformed address")
    audit("tab")

    click(row.get_by_role("link", name="mail-7"))
    panel = page.locator("#decision-panel")
    expect(panel).not_to_contain_text("No decision is open")
    expect(panel).not_to_contain_text("Why a replay is safe")
    for label in ("Retry as is", "Retry with this payload", "Close"):
        expect(panel.get_by_role("button", name=label)).to_be_visible()
    audit("job")

    page.get_by_label("Note").fill("The address was mistyped at signup")
    payload = page.get_by_label("Corrected payload (JSON)")
    payload.fill('{"to": "ann@example.com", "subject": "Your invoice"')  # a brace short
    click(panel.get_by_role("button", name="Retry with this payload"))
    expect(page.locator("#decision-result .notice-error")).to_contain_text("is not valid JSON")
    expect(page.locator("#decision-result .notice-error")).to_contain_text("Nothing changed.")
    expect(page.get_by_label("Corrected payload (JSON)")).to_have_value(
        '{"to": "ann@example.com", "subject": "Your invoice"')  # kept, to fix
    expect(page.get_by_label("Note")).to_have_value("The address was mistyped at signup")
    assert Job.objects.get(job_id="mail-7").status == "failed"
    audit("refused-edit")

    page.get_by_label("Corrected payload (JSON)").fill('{"to": "ann@example.com", "subject": "Your invoice"}')
    click(page.locator("#decision-panel").get_by_role("button", name="Retry with this payload"))
    expect(page.locator("#decision-result .notice-success")).to_contain_text("Retry with this payload: recorded.")
    expect(page.locator("[data-job-status]")).to_have_text("pending")
    expect(page.locator('#timeline [data-kind="operator_corrected_payload"]')).to_contain_text(operator.username)
    page.screenshot(path=artifacts / "failed-work-retried.png", full_page=True)
    audit("retried")

    assert click.count == 4  # overview → failed tab → job → (refused) → retry
    change = LedgerEvent.objects.get(job__job_id="mail-7", kind="operator_corrected_payload")
    assert change.actor == operator.username and change.evidence["after"] == {"to": "ann@example.com",
                                                                               "subject": "Your invoice"}
    assert runtime.run_job("mail-7", worker="w") == "succeeded"
    audit.assert_clean()


def test_a_blocked_batch_is_re_checked_and_replayed_on_a_filter_once_the_login_is_fixed(
    live_server, browser, log_in, operator, provider, artifacts
):
    _profile(provider, "someone-else")
    for n in range(3):
        _blocked_post(provider, f"post-{n}")
    page = log_in(browser, operator)
    audit, click = Audit(page), Clicks()
    click(page.get_by_role("link", name="Blocked, nothing sent"))
    expect(page.locator('[data-tab-count="blocked"]')).to_have_text("3")
    audit("blocked-tab")
    page.get_by_label("Action").select_option("social.publish_post")
    expect(page).to_have_url(re.compile(r"action=social\.publish_post"))
    _profile(provider, BINDING["account"])  # someone logs the profile back in

    for button, done in (("Re-check identity", "Re-check identity"), ("Replay", "Replay")):
        select_all = page.get_by_label("Select all 3 jobs matching this filter, not only this page")
        click(select_all)
        page.locator("#bulk-note").fill("Profile p1 logged back into acme-social")
        click(page.locator("#bulk-form").get_by_role("button", name=button, exact=True))
        expect(page.locator("#run-title")).to_have_text("Done: 3 of 3 jobs", timeout=30_000)
        expect(page.locator("[data-succeeded]")).to_have_text("3")
        expect(page.locator("h1")).to_contain_text(done)
        audit(f"run-{button.split()[0].lower()}")
        click(page.get_by_role("link", name="Back to the queue"))

    for n in range(3):
        assert Job.objects.get(job_id=f"post-{n}").status == "pending"
        assert runtime.run_job(f"post-{n}", worker="w") == "succeeded"
        assert provider.effects(marker=f"social.publish_post:post-{n}")["count"] == 1
    assert click.count == 7  # blocked tab; per run: select all, decide, back to the queue
    audit.assert_clean()
