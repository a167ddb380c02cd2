"""Production settings pass Django's deploy checks; headers, login throttling, size limits."""

import os
import secrets
import subprocess
import sys
from datetime import timedelta

import pytest
from axes.models import AccessAttempt
from django.test import Client, RequestFactory

from console.hardening import client_address
from tests.conftest import _persona
from tests.processes import ROOT, database_url_of_tests

pytestmark = pytest.mark.django_db


@pytest.mark.django_db(transaction=True)
def test_check_deploy_is_clean_with_production_settings():
    # A qcluster an earlier test of this worker started left Reckon's schedules in the database,
    # overdue since it stopped (config.W001, a running deployment's warning): this test is about
    # the settings, so it starts from a database no cluster has scheduled in.
    from django_q.models import Schedule

    Schedule.objects.filter(name__startswith="reckon.").delete()
    # The browser tests' conftest allows async-unsafe calls for live_server; production does not.
    env = {
        **{k: v for k, v in os.environ.items() if k != "DJANGO_ALLOW_ASYNC_UNSAFE"},
        "RECKON_DEBUG": "false",
        "RECKON_SECRET_KEY": secrets.token_urlsafe(50),
        "RECKON_ALLOWED_HOSTS": "reckon.example.com",
        "DATABASE_URL": database_url_of_tests(),  # production has a database of its own, never the embedded one
    }
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


POLICY = {
    "default-src": "'self'",
    "img-src": "'self' data:",
    "object-src": "'none'",
    "base-uri": "'self'",
    "form-action": "'self'",
    "frame-ancestors": "'none'",
}


def _policy(response) -> dict[str, str]:
    directives = (d.strip().partition(" ") for d in response["Content-Security-Policy"].split(";"))
    return {name: value for name, _, value in directives}


@pytest.mark.parametrize("path", ["/accounts/login/", "/", "/queue/", "/admin/"])
def test_pages_carry_the_security_headers(client, operator, admin_user, path):
    client.force_login(admin_user if path == "/admin/" else operator)  # /admin/ is for superusers only
    response = client.get(path)
    assert response.status_code == 200
    assert _policy(response) == POLICY  # exactly: nothing looser (no unsafe-inline, no other origin)
    assert response["X-Frame-Options"] == "DENY"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Referrer-Policy"] == "same-origin"


@pytest.fixture
def throttle(settings):
    """What RECKON_LOGIN_FAILURE_LIMIT=3 and RECKON_LOGIN_FAILURE_WINDOW=600 map to."""
    settings.AXES_FAILURE_LIMIT = 3
    settings.AXES_COOLOFF_TIME = timedelta(seconds=600)


def _login(client: Client, username: str, password: str, path: str = "/accounts/login/", **headers):
    return client.post(path, {"username": username, "password": password}, **headers)


def _assert_locked_out(response, client: Client):
    assert response.status_code == 429
    page = response.content.decode()
    assert "Too many failed log-in attempts" in page and "in 10 minutes" in page
    assert response["Retry-After"] == "600"
    assert "_auth_user_id" not in client.session


def test_login_is_throttled_per_username_and_address(operator, throttle):
    browser = Client()
    for _ in range(2):
        assert _login(browser, "olga", "wrong").status_code == 200  # the form again, with its error
    _assert_locked_out(_login(browser, "olga", "wrong"), browser)  # the third failure locks
    _assert_locked_out(_login(browser, "olga", "pw-olga"), browser)  # even the right password now
    # The count is a row in PostgreSQL, so every web process sees it.
    assert AccessAttempt.objects.get(username="olga", ip_address="127.0.0.1").failures_since_start >= 3
    # Another address, or another username, is not held up by this one.
    assert _login(Client(REMOTE_ADDR="10.9.9.9"), "olga", "pw-olga").status_code == 302
    assert _login(browser, "someone-else", "wrong").status_code == 200


def test_a_successful_login_clears_the_failures(operator, throttle):
    browser = Client()
    for _ in range(2):
        _login(browser, "olga", "wrong")
    assert _login(browser, "olga", "pw-olga").status_code == 302
    for _ in range(2):
        assert _login(Client(), "olga", "wrong").status_code == 200


def test_the_admin_login_is_throttled_too_and_shares_the_count(admin_user, throttle):
    browser = Client()
    assert _login(browser, "root", "wrong").status_code == 200  # the console's form
    assert _login(browser, "root", "wrong", "/admin/login/").status_code == 200  # the admin's form
    _assert_locked_out(_login(browser, "root", "wrong", "/admin/login/"), browser)
    _assert_locked_out(_login(browser, "root", "pw-root", "/admin/login/"), browser)
    assert Client().get("/admin/").status_code == 302  # still not logged in: the admin sends to its login


def test_an_admin_sees_and_can_lift_a_lock(client, operator, admin_user, throttle):
    for _ in range(3):
        _login(Client(), "olga", "wrong")
    client.force_login(admin_user)
    locked = client.get("/admin/axes/accessattempt/?locked_out=yes")
    assert locked.status_code == 200 and "olga" in locked.content.decode()
    attempt = AccessAttempt.objects.get(username="olga")
    client.post(f"/admin/axes/accessattempt/{attempt.pk}/delete/", {"post": "yes"})
    assert _login(Client(), "olga", "pw-olga").status_code == 302


def test_every_spelling_of_a_username_counts_against_the_same_account(throttle):
    _persona("auditor", "auditors")
    browser = Client()
    # Full-width ａ (NFKC-normalised by Django's login form, so it would log in as `auditor`), then case.
    assert _login(browser, "\uff41uditor", "wrong").status_code == 200
    assert _login(browser, "AUDITOR", "wrong").status_code == 200
    _assert_locked_out(_login(browser, " Auditor ", "wrong"), browser)
    _assert_locked_out(_login(browser, "auditor", "pw-auditor"), browser)
    assert list(AccessAttempt.objects.values_list("username", flat=True).distinct()) == ["auditor"]


def test_behind_a_trusted_proxy_each_forwarded_client_has_its_own_count(settings, operator, throttle):
    settings.RECKON_TRUSTED_PROXIES = ["10.0.0.0/8"]
    proxy = Client(REMOTE_ADDR="10.0.0.2")
    # Whatever the client wrote to the left is ignored; the proxy's own hop (and a trusted inner
    # proxy's) are passed over: the client is 203.0.113.5 every time.
    for forwarded in ("203.0.113.5", "1.1.1.1, 203.0.113.5", "2.2.2.2, 203.0.113.5, 10.0.0.9"):
        last = _login(proxy, "olga", "wrong", HTTP_X_FORWARDED_FOR=forwarded)
    _assert_locked_out(last, proxy)
    assert AccessAttempt.objects.get().ip_address == "203.0.113.5"
    _assert_locked_out(_login(proxy, "olga", "pw-olga", HTTP_X_FORWARDED_FOR="203.0.113.5"), proxy)
    # Another client behind the same proxy is not held up.
    other = Client(REMOTE_ADDR="10.0.0.2")
    assert _login(other, "olga", "pw-olga", HTTP_X_FORWARDED_FOR="203.0.113.6").status_code == 302


def test_a_forwarded_for_header_from_an_untrusted_peer_is_ignored(settings, operator, throttle):
    settings.RECKON_TRUSTED_PROXIES = ["10.0.0.0/8"]
    attacker = Client(REMOTE_ADDR="198.51.100.7")
    for n in range(2):
        assert _login(attacker, "olga", "wrong", HTTP_X_FORWARDED_FOR=f"192.0.2.{n}").status_code == 200
    _assert_locked_out(_login(attacker, "olga", "wrong", HTTP_X_FORWARDED_FOR="192.0.2.99"), attacker)
    assert AccessAttempt.objects.get().ip_address == "198.51.100.7"


@pytest.mark.parametrize(
    ("peer", "forwarded", "client"),
    [
        ("198.51.100.7", "192.0.2.1", "198.51.100.7"),  # untrusted peer: its header is ignored
        ("10.0.0.2", "", "10.0.0.2"),  # a trusted proxy that forwarded nothing
        ("10.0.0.2", "192.0.2.1, 10.0.0.3", "192.0.2.1"),  # two trusted proxies
        ("10.0.0.2", "10.0.0.4, 10.0.0.3", "10.0.0.4"),  # every hop trusted: the leftmost
        ("10.0.0.2", "192.0.2.1, not-an-ip, 10.0.0.3", "10.0.0.3"),  # a malformed hop ends the walk
        ("::ffff:10.0.0.2", "192.0.2.1", "192.0.2.1"),  # IPv4 seen through a dual-stack listener
        ("2001:db8::1", "192.0.2.1", "2001:db8::1"),
        ("", "192.0.2.1", None),  # no peer address: nothing to key on
    ],
)
def test_the_client_address_behind_trusted_proxies(settings, peer, forwarded, client):
    settings.RECKON_TRUSTED_PROXIES = ["10.0.0.0/8"]
    request = RequestFactory().get("/", REMOTE_ADDR=peer, HTTP_X_FORWARDED_FOR=forwarded)
    assert client_address(request) == client


def test_bad_proxy_and_allow_lists_refuse_to_start():
    env = {**os.environ, "RECKON_TRUSTED_PROXIES": "10.0.0.0/8, proxy.internal"}
    result = subprocess.run(
        [sys.executable, "-c", "import config.settings"], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "RECKON_TRUSTED_PROXIES must list IP addresses or networks" in result.stderr
    assert "'proxy.internal'" in result.stderr


def test_oversized_form_posts_are_refused(settings, operator):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    response = Client().post("/accounts/login/", {"username": "olga", "password": "x" * 5000})
    assert response.status_code == 400
