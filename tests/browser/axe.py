"""axe-core on a console page: `assert_no_serious_violations(page, "name")` after it has loaded.

axe comes from the pinned `axe-playwright-python` package (it bundles axe.min.js; nothing is
downloaded when the tests run). Playwright evaluates it through the DevTools protocol, which the
page's Content-Security-Policy does not govern, so the page is checked exactly as it is served.
Every run's full result (every impact) is written to test-artifacts/axe/NAME.json; serious and
critical violations fail the test.

The color-contrast rule is most of axe's time (on the busy audit page 2.1 of 2.6 s; the other
rules 0.4 s), and its verdict on an element depends only on what `CONTRAST_INPUTS` reads: the
text's colour, size, weight, shadow and stroke, the opacity of it and its ancestors, and every
background behind it up to the first opaque one. So a page is checked for contrast when it holds
an element whose inputs no page before it in this process was checked with (and passed); every
other rule runs on every page. tests/browser/test_axe_contrast.py shows a new low-contrast style
caught after a clean page with the same markup skipped the rule.
"""

from __future__ import annotations

import json
import re

from axe_playwright_python.sync_playwright import Axe

from tests.browser.conftest import ARTIFACTS

BLOCKING = ("serious", "critical")
_axe = Axe()

# One string per element axe's color-contrast rule would judge (the parents of text, and form
# fields): the inputs of its verdict. Backgrounds are read up the ancestors, as the console's pages
# put nothing positioned behind text that is not its ancestor (the sticky headers carry their own
# background, which is read).
CONTRAST_INPUTS = r"""() => {
  const judged = new Set(document.querySelectorAll("input, select, textarea, button"));
  const texts = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  while (texts.nextNode()) if (texts.currentNode.textContent.trim()) judged.add(texts.currentNode.parentElement);
  const keys = new Set();
  for (const element of judged) {
    const own = getComputedStyle(element);
    const inputs = [own.color, own.fontSize, own.fontWeight, own.textShadow, own.webkitTextStroke,
                    own.visibility, getComputedStyle(element, "::before").backgroundColor,
                    getComputedStyle(element, "::after").backgroundColor];
    let behind = true;
    for (let node = element; node; node = node.parentElement) {
      const style = node === element ? own : getComputedStyle(node);
      inputs.push(style.opacity, style.filter, style.mixBlendMode);
      if (behind) {
        inputs.push(style.backgroundColor, style.backgroundImage, style.backgroundClip);
        behind = !(style.backgroundImage === "none" && style.backgroundColor.startsWith("rgb("));
      }
    }
    keys.add(inputs.join("|"));
  }
  return [...keys];
}"""
_contrast_judged: set[str] = set()  # inputs the color-contrast rule passed, in this process


def violations(page) -> tuple[list[dict], bool]:
    """axe's violations on the page as it is now (its default rules: WCAG 2.x A/AA and best
    practice; color-contrast when the page shows inputs it has not passed before), and whether
    color-contrast ran."""
    inputs = set(page.evaluate(CONTRAST_INPUTS))
    contrast = not inputs <= _contrast_judged
    options = {"resultTypes": ["violations"]}
    if not contrast:
        options["rules"] = {"color-contrast": {"enabled": False}}
    found = _axe.run(page, options=options).response["violations"]
    if contrast and not any(v["id"] == "color-contrast" for v in found):
        _contrast_judged.update(inputs)
    return found, contrast


def summary(found: list[dict]) -> str:
    return "\n".join(
        f"- {v['impact']}: {v['id']} ({v['help']}) at "
        + ", ".join(" ".join(node["target"]) for node in v["nodes"][:5])
        for v in found
    )


def check(page, name: str) -> list[dict]:
    """Run axe, keep its result as an artifact, and return the serious and critical violations."""
    found, contrast = violations(page)
    folder = ARTIFACTS / "axe"
    folder.mkdir(parents=True, exist_ok=True)
    record = {
        "page": name,
        "url": page.url,
        "color_contrast": "checked" if contrast else "every element's inputs passed on an earlier page",
        "violations": [
            {"id": v["id"], "impact": v["impact"], "help": v["help"],
             "targets": [node["target"] for node in v["nodes"]]}
            for v in found
        ],
    }
    (folder / f"{re.sub(r'[^A-Za-z0-9_.-]+', '-', name)}.json").write_text(json.dumps(record, indent=1))
    return [v for v in found if v["impact"] in BLOCKING]


def assert_no_serious_violations(page, name: str = "page") -> None:
    """Fail when axe finds a serious or critical violation on the page."""
    serious = check(page, name)
    assert not serious, f"axe on {name} ({page.url}):\n{summary(serious)}"
