"""Production settings pass Django's deploy checks; headers, login throttling, size limits."""

import os
import secrets
import subprocess
import sys

import pytest
from django.core.cache import cache
from django.test import Client

from tests.processes import ROOT, database_url_of_tests

pytestmark = pytest.mark.django_db


def test_check_deploy_is_clean_with_production_settings():
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


def test_pages_carry_the_security_headers():
    response = Client().get("/accounts/login/")
    assert response.status_code == 200
    csp = response["Content-Security-Policy"]
    assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp and "unsafe-inline" not in csp
    assert response["X-Frame-Options"] == "DENY"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Referrer-Policy"] == "same-origin"


@pytest.fixture
def throttle(settings):
    settings.RECKON_LOGIN_FAILURE_LIMIT = 3
    settings.RECKON_LOGIN_FAILURE_WINDOW = 600
    cache.clear()
    yield
    cache.clear()


def _login(client: Client, username: str, password: str):
    return client.post("/accounts/login/", {"username": username, "password": password})


def test_login_is_throttled_per_username_and_address(operator, throttle):
    browser = Client()
    for _ in range(3):
        assert _login(browser, "olga", "wrong").status_code == 200  # the form again, with its error
    refused = _login(browser, "olga", "pw-olga")  # even the right password now
    assert refused.status_code == 429
    assert "Too many failed log-in attempts" in refused.content.decode()
    assert refused["Retry-After"] == "600"
    assert "_auth_user_id" not in browser.session
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


def test_oversized_form_posts_are_refused(settings, operator):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    response = Client().post("/accounts/login/", {"username": "olga", "password": "x" * 5000})
    assert response.status_code == 400
