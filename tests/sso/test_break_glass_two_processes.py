"""Issue 42, item 2, on real processes: two gunicorns in production mode share no memory and no
cache, only PostgreSQL. A break-glass code used through one is refused through the other, and the
wrong codes sent to both are one count for the account."""

import re
import secrets
import time

import pytest
import requests
from allauth.mfa.totp.internal.auth import TOTP, format_hotp_value, hotp_value, yield_hotp_counters_from_time
from django.contrib.auth.models import User

from console.models import SignInEvent
from sso.models import CodeFailures, UsedCode
from sso.second_factor import CODE_TRIES
from tests.processes import WebServer, database_url_of_tests, production_env, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

SECRET = "JBSWY3DPEHPK3PXPJBSWY3DPEHPK3PXP"  # nosec B105  # the test's own TOTP secret
PASSWORD = "pw-breakglass-long"  # nosec B105  # the test's own password


KEY = secrets.token_urlsafe(50)  # the servers' RECKON_SECRET_KEY, which encrypts the TOTP secret


@pytest.fixture(scope="module")
def web_processes(django_db_setup):
    env = production_env(
        DATABASE_URL=database_url_of_tests(), RECKON_SECRET_KEY=KEY, RECKON_SSO_ONLY="true",
        RECKON_BREAK_GLASS_ACCOUNTS="breakglass", RECKON_OIDC_PROVIDERS="testidp=https://idp.invalid",
        RECKON_OIDC_CLIENT_IDS="testidp=reckon", RECKON_OIDC_CLIENT_SECRETS="testidp=not-used-here",
        RECKON_SESSION_COOKIE_SECURE="false", RECKON_CSRF_COOKIE_SECURE="false")  # plain HTTP on loopback
    with WebServer(env=env, threads=2, log_name="break-glass-a") as first, \
            WebServer(env=env, threads=2, log_name="break-glass-b") as second:
        yield first, second


@pytest.fixture
def two_web_processes(web_processes, settings):
    settings.SECRET_KEY = KEY  # the authenticator's secret is encrypted under the servers' key
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.PBKDF2PasswordHasher"]  # one the servers check
    user = User.objects.create_superuser("breakglass", password=PASSWORD)
    TOTP.activate(user, SECRET)
    return web_processes


def password_step(server: WebServer) -> requests.Session:
    browser = requests.Session()
    page = browser.get(f"{server.url}/accounts/login/", timeout=30)
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    answer = browser.post(f"{server.url}/accounts/login/", timeout=30, allow_redirects=False,
                          data={"csrfmiddlewaretoken": token, "username": "breakglass", "password": PASSWORD})
    assert answer.status_code == 302 and answer.headers["Location"] == "/accounts/login/code/"
    return browser


def code_step(server: WebServer, browser: requests.Session, code: str) -> requests.Response:
    page = browser.get(f"{server.url}/accounts/login/code/", timeout=30)
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    return browser.post(f"{server.url}/accounts/login/code/", data={"csrfmiddlewaretoken": token, "code": code},
                        timeout=30, allow_redirects=False)


def fresh_code() -> str:
    """The current step's code, early enough in its 30 s that the server still checks that step."""
    wait_for(lambda: time.time() % 30 < 20, timeout=15, message="the start of a TOTP step")
    return format_hotp_value(hotp_value(SECRET, next(yield_hotp_counters_from_time())))


def test_a_code_used_through_one_web_process_is_refused_through_the_other(two_web_processes):
    first, second = two_web_processes
    code = fresh_code()
    signed_in = code_step(first, password_step(first), code)
    assert signed_in.status_code == 302 and UsedCode.objects.count() == 1

    refused = code_step(second, password_step(second), code)
    assert refused.status_code == 400 and "wrong or already used" in refused.text
    assert SignInEvent.objects.filter(kind=SignInEvent.BREAK_GLASS).count() == 1
    assert SignInEvent.objects.filter(kind=SignInEvent.FAILED, username="breakglass",
                                      detail__contains="wrong or already used").count() == 1


def test_wrong_codes_through_both_processes_are_one_count(two_web_processes):
    first, second = two_web_processes
    browsers = [(server, password_step(server)) for server in (first, second)]
    valid = {format_hotp_value(hotp_value(SECRET, step)) for step in yield_hotp_counters_from_time()}
    wrong = next(code for code in ("000000", "111111", "222222") if code not in valid)
    # Turn about: the first process sees wrong codes 1, 3 and 5, the second 2 and 4.
    answers = [code_step(*browsers[n % 2], wrong) for n in range(CODE_TRIES)]

    # The first process's fifth refusal starts the wait: it counted the second process's codes too.
    assert [answer.status_code for answer in answers] == [400] * (CODE_TRIES - 1) + [429]
    assert int(answers[-1].headers["Retry-After"]) > 0
    assert CodeFailures.objects.get(user__username="breakglass").failures == CODE_TRIES
    assert SignInEvent.objects.filter(kind=SignInEvent.FAILED, username="breakglass").count() == CODE_TRIES
    assert not UsedCode.objects.exists()
