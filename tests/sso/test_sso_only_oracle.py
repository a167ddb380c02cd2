"""Issue 42, item 3: with SSO only, the password form is no oracle. An account it refuses gets one
answer for the right password, a wrong one and no such account, before any password is checked
(no hash is computed, so no timing tells them apart either), and each try is a failed sign-in."""

import re

import pytest
from axes.models import AccessAttempt
from django.contrib.auth.hashers import MD5PasswordHasher
from django.contrib.auth.models import User
from django.db.models import Sum
from django.test import Client

from console.models import SignInEvent

pytestmark = pytest.mark.django_db

PASSWORD = "pw-olga-right"  # nosec B105  # the test's own password


class CountingHasher(MD5PasswordHasher):
    """A real hasher that counts how often a password is hashed or checked."""

    algorithm = "counting_md5"
    used = 0

    def encode(self, password, salt):
        CountingHasher.used += 1
        return super().encode(password, salt)

    def verify(self, password, encoded):
        CountingHasher.used += 1
        return super().verify(password, encoded)


@pytest.fixture
def sso_only(settings):
    settings.PASSWORD_HASHERS = ["tests.sso.test_sso_only_oracle.CountingHasher"]
    settings.RECKON_OIDC_PROVIDERS = {"testidp": "https://idp.invalid"}
    settings.RECKON_OIDC_NAMES = {"testidp": "Test IdP"}
    settings.RECKON_SSO_ONLY = True
    settings.RECKON_BREAK_GLASS_ACCOUNTS = ["breakglass"]
    User.objects.create_user("olga", password=PASSWORD)
    CountingHasher.used = 0


def sign_in(username: str, password: str, address: str):
    response = Client(REMOTE_ADDR=address).post("/accounts/login/", {"username": username, "password": password})
    # The masked CSRF token differs at every render; the rest of the page must not.
    body = re.sub(r'name="csrfmiddlewaretoken" value="[^"]+"|"X-CSRFToken": "[^"]+"', "CSRF", response.content.decode())
    body = re.sub(r'<time datetime="[^"]+">[^<]+</time>', "TIME", body)  # a lock-out's end, to the second
    return response.status_code, body.replace(username, "USERNAME")


def test_the_right_and_a_wrong_password_get_the_same_answer_and_neither_is_checked(sso_only):
    right = sign_in("olga", PASSWORD, "10.0.5.1")
    wrong = sign_in("olga", "not-her-password", "10.0.5.2")
    nobody = sign_in("nobody-here", PASSWORD, "10.0.5.3")

    assert right == wrong == nobody
    assert right[0] == 200 and "Password sign-in is off here: sign in through Test IdP." in right[1]
    assert "didn't match" not in right[1]
    assert CountingHasher.used == 0  # no password was hashed or compared: nothing to time
    assert not SignInEvent.objects.filter(kind=SignInEvent.SIGNED_IN).exists()


def test_each_refusal_is_a_failed_sign_in_for_django_axes_and_the_trail(sso_only, settings):
    sign_in("olga", PASSWORD, "10.0.6.1")
    sign_in("olga", "not-her-password", "10.0.6.1")

    assert AccessAttempt.objects.filter(username="olga").aggregate(n=Sum("failures_since_start"))["n"] == 2
    trail = SignInEvent.objects.filter(kind=SignInEvent.FAILED, username="olga")
    assert trail.count() == 2
    assert all("RECKON_SSO_ONLY" in event.detail and "not checked" in event.detail for event in trail)

    # At django-axes' limit this username and address are locked, whatever the password: still no oracle.
    for _ in range(settings.AXES_FAILURE_LIMIT - 2):
        sign_in("olga", "not-her-password", "10.0.6.1")
    locked_right, locked_wrong = sign_in("olga", PASSWORD, "10.0.6.1"), sign_in("olga", "guess", "10.0.6.1")
    assert locked_right == locked_wrong and locked_right[0] == 429
    assert CountingHasher.used == 0


def test_a_break_glass_account_still_gets_its_password_checked(sso_only):
    User.objects.create_user("breakglass", password="pw-breakglass-long")
    CountingHasher.used = 0
    wrong = Client(REMOTE_ADDR="10.0.7.1").post("/accounts/login/", {"username": "breakglass", "password": "x"})
    assert wrong.status_code == 200 and "didn't match" in wrong.content.decode()
    assert CountingHasher.used >= 1
    right = Client(REMOTE_ADDR="10.0.7.2").post("/accounts/login/", {"username": "breakglass",
                                                                     "password": "pw-breakglass-long"})
    assert right.status_code == 302 and right.url == "/accounts/login/code/"
