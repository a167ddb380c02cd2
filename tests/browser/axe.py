"""axe-core on a console page: `assert_no_serious_violations(page, "name")` after it has loaded.

axe comes from the pinned `axe-playwright-python` package (it bundles axe.min.js; nothing is
downloaded when the tests run). Playwright evaluates it through the DevTools protocol, which the
page's Content-Security-Policy does not govern, so the page is checked exactly as it is served.
Every run's full result (every impact) is written to test-artifacts/axe/NAME.json; serious and
critical violations fail the test.
"""

from __future__ import annotations

import json
import re

from axe_playwright_python.sync_playwright import Axe

from tests.browser.conftest import ARTIFACTS

BLOCKING = ("serious", "critical")
_axe = Axe()


def violations(page) -> list[dict]:
    """axe's violations on the page as it is now (its default rules: WCAG 2.x A/AA and best practice)."""
    return _axe.run(page).response["violations"]


def summary(found: list[dict]) -> str:
    return "\n".join(
        f"- {v['impact']}: {v['id']} ({v['help']}) at "
        + ", ".join(" ".join(node["target"]) for node in v["nodes"][:5])
        for v in found
    )


def check(page, name: str) -> list[dict]:
    """Run axe, keep its result as an artifact, and return the serious and critical violations."""
    found = violations(page)
    folder = ARTIFACTS / "axe"
    folder.mkdir(parents=True, exist_ok=True)
    record = {
        "page": name,
        "url": page.url,
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
