"""axe's color-contrast rule runs on a page only when the page shows an element whose contrast
inputs have not passed before (tests/browser/axe.py): what that shortcut skips, and what it does not."""

from __future__ import annotations

import pytest

from tests.browser.axe import violations

# Sizes and colours no console page uses, so that these inputs are new to this process.
PAGE = """<!doctype html><html lang="en"><head><title>contrast</title><style>
  body {{ background: #fff; font-size: 13.7px; }} p.plain {{ color: #123; }} p.faint {{ color: #aab; background: #bbc; }}
</style></head><body><main><h1>Contrast</h1><p class="plain">Readable text.</p>{extra}</main></body></html>"""


@pytest.fixture
def page(browser):
    context = browser.new_context()
    yield context.new_page()
    context.close()


def _contrast_failures(found: list[dict]) -> list[dict]:
    return [v for v in found if v["id"] == "color-contrast"]


def test_a_new_low_contrast_style_is_caught_after_the_same_page_without_it_was_skipped(page):
    page.set_content(PAGE.format(extra=""))
    found, ran = violations(page)
    assert ran and found == []  # inputs never seen: judged, and clean

    page.set_content(PAGE.format(extra="<p class='plain'>More readable text.</p>"))
    found, ran = violations(page)
    assert not ran and found == []  # the same inputs (other words): the rule is not run again

    page.set_content(PAGE.format(extra="<p class='faint'>Faint text.</p>"))
    found, ran = violations(page)
    assert ran and _contrast_failures(found)[0]["impact"] == "serious", found  # a new style: judged, and caught
    assert [node["target"] for node in _contrast_failures(found)[0]["nodes"]] == [[".faint"]]

    page.set_content(PAGE.format(extra="<p class='faint'>Faint text, again.</p>"))
    found, ran = violations(page)
    assert ran and _contrast_failures(found), found  # inputs that failed are never taken as passed


def test_a_background_behind_the_text_is_part_of_its_inputs(page):
    page.set_content(PAGE.format(extra="<div style='background: #eef'><p class='plain'>On a tint.</p></div>"))
    violations(page)
    page.set_content(PAGE.format(extra="<div style='background: #346'><p class='plain'>On a dark panel.</p></div>"))
    found, ran = violations(page)
    assert ran and _contrast_failures(found), found  # the same text style, a new background: judged again
