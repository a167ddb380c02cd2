"""The console at a wide desk (1440 px) and on a phone (390 px): nothing cut off, nothing to scroll sideways.

Full-page screenshots of every page at both widths go to test-artifacts/layout/.
"""

from __future__ import annotations

import pytest

from tests.browser.scenario import populate

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

WIDE, NARROW = 1440, 390

# Cells that end outside the box that clips them (an ancestor with overflow other than visible,
# or the viewport): what an operator cannot see without scrolling something sideways.
CLIPPED_CELLS = """() => {
  const clipped = [];
  const viewport = document.documentElement.clientWidth;
  for (const cell of document.querySelectorAll("td, th")) {
    const r = cell.getBoundingClientRect();
    if (!r.width) continue;
    const where = (cell.closest("table").id || cell.closest("[id]").id) + ": " + cell.textContent.trim().slice(0, 40);
    if (r.right > viewport + 1) { clipped.push(where + " (past the viewport)"); continue; }
    for (let box = cell.parentElement; box && box !== document.body; box = box.parentElement) {
      if (getComputedStyle(box).overflowX === "visible") continue;
      const b = box.getBoundingClientRect();
      if (r.right > b.right + 1 || r.left < b.left - 1) { clipped.push(where + " (inside #" + box.id + ")"); break; }
    }
  }
  return clipped;
}"""

OVERFLOW = """() => ({scroll: document.documentElement.scrollWidth, client: document.documentElement.clientWidth})"""


def _pages(jobs: dict[str, str]) -> dict[str, str]:
    return {
        "overview": "/",
        "queue": "/queue/",
        "queue-reconciling": "/queue/?tab=reconciling",
        "queue-failed": "/queue/?tab=failed",
        "approvals": "/approvals/",
        "audit": "/audit/",
        **{f"job-{job_id}": f"/jobs/{job_id}/" for job_id in jobs.values()},
    }


@pytest.fixture
def busy_console(operator, approver):
    return populate(operator, approver)


def test_at_1440_px_no_table_cell_is_cut_off(live_server, browser, log_in, operator, busy_console, artifacts):
    page = log_in(browser, operator)
    page.set_viewport_size({"width": WIDE, "height": 900})
    folder = artifacts / "layout"
    folder.mkdir(exist_ok=True)
    clipped = {}
    for name, url in _pages(busy_console).items():
        page.goto(live_server.url + url, wait_until="load")  # served whole: no request after it
        page.screenshot(path=folder / f"{WIDE}-{name}.png", full_page=True)
        if found := page.evaluate(CLIPPED_CELLS):
            clipped[name] = found
        size = page.evaluate(OVERFLOW)
        assert size["scroll"] <= size["client"], f"{name} scrolls sideways at {WIDE} px: {size}"
    assert not clipped, clipped


def test_at_390_px_the_queue_and_job_pages_fit_the_screen(
    live_server, browser, log_in, operator, busy_console, artifacts
):
    page = log_in(browser, operator)
    page.set_viewport_size({"width": NARROW, "height": 844})
    folder = artifacts / "layout"
    folder.mkdir(exist_ok=True)
    wide = {}
    for name, url in _pages(busy_console).items():
        page.goto(live_server.url + url, wait_until="load")  # served whole: no request after it
        page.screenshot(path=folder / f"{NARROW}-{name}.png", full_page=True)
        size = page.evaluate(OVERFLOW)
        if size["scroll"] > size["client"]:
            wide[name] = size
    assert not wide, f"pages wider than {NARROW} px: {wide}"
    # A table row is a card there: every cell says which column it is.
    page.goto(f"{live_server.url}/queue/")
    cell = page.locator('tr[data-job="rot-operator"] td[data-label="Action"]')
    assert cell.evaluate("c => getComputedStyle(c, '::before').content") == '"Action"'
