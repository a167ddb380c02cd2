"""An operator without a mouse: log in, skip to the content, reach the queue, open a job and decide,
with the focus visible at every step."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from ledger.models import Job
from tests.browser.scenario import populate

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

# The focused element, and whether it shows that it has the focus (an outline) in the window.
FOCUSED = """() => {
  const el = document.activeElement;
  const style = getComputedStyle(el);
  const box = el.getBoundingClientRect();
  return {
    tag: el.tagName.toLowerCase(), id: el.id, role: el.getAttribute("role"),
    name: (el.getAttribute("aria-label") || el.innerText || el.value || "").trim().slice(0, 60),
    outlined: style.outlineStyle !== "none" && parseFloat(style.outlineWidth) >= 2,
    onScreen: box.width > 0 && box.height > 0 && box.left >= 0 && box.right <= innerWidth
      && box.top < innerHeight && box.bottom > 0,
    inMain: Boolean(el.closest("main")),
  };
}"""


class Keyboard:
    """Tab through a page, remembering every stop that did not show its focus."""

    def __init__(self, page):
        self.page = page
        self.unseen = []

    def tab(self) -> dict:
        self.page.keyboard.press("Tab")
        focused = self.page.evaluate(FOCUSED)
        # (On <body> the focus has gone to the browser's own controls, past the page's last stop.)
        if focused["tag"] != "body" and not (focused["outlined"] and focused["onScreen"]):
            self.unseen.append((self.page.url, focused))
        return focused

    def tab_to(self, wanted, limit: int = 80) -> dict:
        """Tab until `wanted(focused)`; fail after `limit` stops."""
        seen = []
        for _ in range(limit):
            focused = self.tab()
            if wanted(focused):
                return focused
            seen.append(focused["name"] or focused["tag"])
        raise AssertionError(f"not reached by Tab in {limit} stops on {self.page.url}: {seen}")


def test_an_operator_works_through_the_console_with_the_keyboard_alone(
    live_server, browser, operator, approver, artifacts
):
    populate(operator, approver)
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    keys = Keyboard(page)
    try:
        page.goto(f"{live_server.url}/accounts/login/")
        # The log-in form puts the focus in its first field (autofocus).
        assert page.evaluate("document.activeElement.id") == "id_username"
        page.keyboard.type(operator.username)
        keys.tab()
        page.keyboard.type(f"pw-{operator.username}")
        page.keyboard.press("Enter")
        page.wait_for_url(f"{live_server.url}/")

        # The skip link is the first stop, shows itself, and puts the next stop inside <main>.
        skip = keys.tab()
        assert skip["name"] == "Skip to content" and skip["onScreen"], skip
        page.screenshot(path=artifacts / "keyboard-skip-link.png")
        page.keyboard.press("Enter")
        assert page.evaluate("document.activeElement.id") == "content"
        assert keys.tab()["inMain"]

        # To the queue through the header, then to a job in it.
        page.keyboard.press("Shift+Tab")
        page.keyboard.press("Shift+Tab")
        keys.tab_to(lambda f: f["tag"] == "a" and f["name"] == "Queue")
        page.keyboard.press("Enter")
        page.wait_for_url(f"{live_server.url}/queue/")
        keys.tab_to(lambda f: f["tag"] == "a" and f["name"] == "rot-operator")
        page.keyboard.press("Enter")
        page.wait_for_url(f"{live_server.url}/jobs/rot-operator/?tab=human")  # the list it came from

        # The decision: write the note, then press the button.
        keys.tab_to(lambda f: f["id"] == "decision-note")
        page.keyboard.type("Vault audit log shows no rotation at that time")
        keys.tab_to(lambda f: f["tag"] == "button" and f["name"].startswith("Mark not found"))
        page.screenshot(path=artifacts / "keyboard-decision.png")
        page.keyboard.press("Enter")
        expect(page.locator("#decision-panel .notice-success")).to_contain_text("Mark not found: recorded.")
        assert Job.objects.get(job_id="rot-operator").status == "awaiting_approval"

        # On to the approvals and the audit, the rest of the header.
        keys.tab_to(lambda f: f["tag"] == "a" and f["name"] == "Go to approvals")
        page.keyboard.press("Enter")
        page.wait_for_url(f"{live_server.url}/approvals/")
        # Evidence scrolls in a region the keyboard reaches (where arrow keys scroll it).
        keys.tab_to(lambda f: f["role"] == "region" and f["name"].startswith("Evidence for request"))
        keys.tab_to(lambda f: f["tag"] == "a" and f["name"] == "Audit")
        page.keyboard.press("Enter")
        page.wait_for_url(f"{live_server.url}/audit/")
        keys.tab_to(lambda f: f["id"] == "id_job")
        page.keyboard.type("rot-operator")
        page.keyboard.press("Enter")
        expect(page).to_have_url(f"{live_server.url}/audit/?q=&job=rot-operator&key=&actor=&kind=&since=&until=")
        expect(page.locator("#audit-table > table tbody")).to_contain_text("operator_marked_not_found")
    finally:
        context.close()
    assert not keys.unseen, f"focus not visible at: {keys.unseen}"
