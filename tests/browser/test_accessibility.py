"""axe-core on every console page, for every role that can see it, empty and full.

A page fails on any serious or critical violation (tests/browser/axe.py); every run's full result
is kept in test-artifacts/axe/. New pages belong in PAGES (or in a test of their own that calls
`assert_no_serious_violations`).
"""

from __future__ import annotations

import pytest
from django.core.exceptions import SuspiciousOperation
from django.urls import include, path

from tests.browser.axe import check, summary
from tests.browser.scenario import populate
from tests.conftest import _persona
from tests.console.conftest import with_tenants

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def _fail(request):
    raise RuntimeError("a bug, for the error page test")


def _bad(request):
    raise SuspiciousOperation("a malformed request, for the error page test")


# The console's URLs and two that fail, for the 400 and 500 pages (ROOT_URLCONF = this module).
urlpatterns = [
    path("test-errors/500/", _fail),
    path("test-errors/400/", _bad),
    path("", include("config.urls")),
]

# Read pages of a console with something on them; job pages are added from the scenario.
PAGES = {
    "overview": "/",
    "queue": "/queue/",
    "queue-reconciling": "/queue/?tab=reconciling",
    "queue-filtered": "/queue/?tab=human&status=needs_operator&action=vault.rotate_credential&tenant=acme"
                      "&older_than=&q=rot&sort=newest&size=50",
    "queue-no-match": "/queue/?tab=human&q=nothing-matches-this",
    "queue-one-per-page": "/queue/?tab=human&size=1",
    "approvals": "/approvals/",
    "audit": "/audit/",
    "audit-filtered": "/audit/?job=inv-unknown&actor=worker-a&kind=observation_lost",
    "audit-bad-filter": "/audit/?since=not-a-time",
    "search": "/search/?q=INV",
    "search-no-match": "/search/?q=nothing-matches-this",
    "queue-blocked": "/queue/?tab=blocked",
    "queue-failed": "/queue/?tab=failed",
}
EMPTY_PAGES = {"overview": "/", "queue": "/queue/", "approvals": "/approvals/", "audit": "/audit/",
               "search": "/search/?q=a"}
ROLES = ["operator", "approver", "auditor", "admin_user"]


# Colour is never the only carrier of meaning: an element coloured for a state (status-failed,
# execution-unknown, outcome-not_found...) says that state in words.
WORDLESS_STATES = """() => [...document.querySelectorAll("[class]")].flatMap(el => [...el.classList]
  .filter(c => /^(status|delivery|execution|effect|outcome|approval)-/.test(c))
  .filter(c => !el.textContent.includes(c.slice(c.indexOf("-") + 1)))
  .map(c => c + ": " + el.textContent.trim().slice(0, 40)))"""


def _visit(page, base: str, pages: dict[str, str], prefix: str) -> dict[str, list]:
    serious = {}
    for name, url in pages.items():
        # "load": the page is served whole (no request after it but the 5 s polls), its CSS and
        # deferred script have run; "networkidle" only added half a second of waiting per page.
        response = page.goto(base + url, wait_until="load")
        assert response.status == 200, f"{name}: {response.status}"
        serious[name] = check(page, f"{prefix}-{name}")
        assert not page.evaluate(WORDLESS_STATES), f"{name}: a state shown by colour alone"
    return serious


def _assert_clean(serious: dict[str, list]) -> None:
    failing = {name: found for name, found in serious.items() if found}
    assert not failing, "\n".join(f"{name}:\n{summary(found)}" for name, found in failing.items())


def test_every_page_of_a_busy_console_passes_axe_for_every_role(live_server, browser, log_in, request):
    """One busy console, every role through every page of it (each in its own browser context)."""
    operator, approver = request.getfixturevalue("operator"), request.getfixturevalue("approver")
    jobs = populate(operator, approver)
    pages = {**PAGES, **{f"job-{job_id}": f"/jobs/{job_id}/" for job_id in jobs.values()}}
    serious = {}
    for role in ROLES:
        user = with_tenants(request.getfixturevalue(role))
        page = log_in(browser, user)
        serious |= {f"{role}: {name}": found for name, found in _visit(page, live_server.url, pages, role).items()}
    _assert_clean(serious)


@pytest.mark.parametrize("role", ROLES)
def test_every_page_of_an_empty_console_passes_axe(live_server, browser, log_in, role, request):
    user = with_tenants(request.getfixturevalue(role))
    page = log_in(browser, user)
    _assert_clean(_visit(page, live_server.url, EMPTY_PAGES, f"empty-{role}"))


def test_a_user_without_tenants_sees_a_clean_notice(live_server, browser, log_in, db):
    page = log_in(browser, _persona("nat", "operators"))
    serious = _visit(page, live_server.url, EMPTY_PAGES, "no-tenants")
    assert page.locator("[data-no-tenants]").is_visible()
    _assert_clean(serious)


def test_the_login_lockout_and_error_pages_pass_axe(live_server, browser, log_in, operator, settings):
    settings.AXES_FAILURE_LIMIT = 2
    settings.ROOT_URLCONF = __name__  # (pytest-django runs with DEBUG off: the error pages people get)
    base = live_server.url
    serious = {}
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    try:
        page.goto(f"{base}/accounts/login/")
        serious["login"] = check(page, "login")

        page.get_by_label("Username").fill("mallory")  # locked out below: not a persona used later
        page.get_by_label("Password").fill("wrong")
        with page.expect_navigation():  # the refusal is a new page: read it once it is there
            page.get_by_role("button", name="Log in").click()
        assert page.get_by_role("alert").is_visible()
        serious["login-failed"] = check(page, "login-failed")

        page.get_by_label("Password").fill("wrong again")
        with page.expect_navigation() as locked:
            page.get_by_role("button", name="Log in").click()
        assert locked.value.status == 429
        serious["locked-out"] = check(page, "locked-out")

        page.goto(f"{base}/accounts/login/")
        context.clear_cookies()  # the form's CSRF token no longer matches a cookie
        page.get_by_label("Username").fill("someone")
        page.get_by_label("Password").fill("anything")
        with page.expect_navigation() as refused:
            page.get_by_role("button", name="Log in").click()
        assert refused.value.status == 403
        serious["csrf-failure"] = check(page, "csrf-failure")

        for name, url, status in [("400", "/test-errors/400/", 400), ("500", "/test-errors/500/", 500),
                                  ("404-anonymous", "/no-such-page/", 404)]:
            assert page.goto(base + url).status == status
            serious[name] = check(page, name)
    finally:
        context.close()

    nobody = log_in(browser, _persona("nora", None))  # logged in, but in no console group
    assert nobody.goto(f"{base}/").status == 403
    serious["403"] = check(nobody, "403")
    member = log_in(browser, operator)
    assert member.goto(f"{base}/jobs/no-such-job/").status == 404
    serious["404"] = check(member, "404")
    _assert_clean(serious)
