"""Password and break-glass sessions are bounded: they end after their age, a session from before
the bound existed ends at once, and turning SSO only on ends every password session but the
break-glass accounts'."""

import pytest
from django.contrib.auth.models import User
from django.test import Client

from console.models import SignInEvent
from sso.trail import BREAK_GLASS_KEY, PASSWORD_SESSION_KEY

pytestmark = pytest.mark.django_db


@pytest.fixture
def olga(operator):
    return operator


def signed_in_client(user) -> Client:
    client = Client()
    assert client.post("/accounts/login/", {"username": user.username, "password": "pw-olga"}).status_code == 302
    return client


def age_session(client: Client, seconds: float) -> None:
    """Move the session's start into the past, as if `seconds` had gone by."""
    session = client.session
    session[PASSWORD_SESSION_KEY] -= seconds
    session.save()


def ended(client: Client) -> bool:
    answer = client.get("/queue/")
    return answer.status_code == 302 and answer.url.startswith("/accounts/login/") and "_auth_user_id" not in client.session


def test_a_password_session_ends_after_its_bound(olga, settings):
    settings.RECKON_PASSWORD_SESSION_S = 600
    client = signed_in_client(olga)
    age_session(client, 590)
    assert client.get("/").status_code == 200
    age_session(client, 20)
    assert ended(client)
    assert SignInEvent.objects.filter(kind=SignInEvent.SIGNED_OUT, username="olga",
                                      detail="a password session lasts at most 600 s: sign in again").exists()


def test_a_session_from_before_the_bound_ends_at_once(olga):
    client = signed_in_client(olga)
    session = client.session
    del session[PASSWORD_SESSION_KEY]  # as sessions made before this release carry no start
    session.save()
    assert ended(client)


def test_turning_sso_only_on_ends_password_sessions_but_not_break_glass_ones(olga, settings):
    settings.RECKON_BREAK_GLASS_ACCOUNTS = ["breakglass"]
    breakglass = User.objects.create_superuser("breakglass", password="pw-olga")  # nosec B106  # the test's own password
    client, glass = signed_in_client(olga), signed_in_client(breakglass)
    settings.RECKON_OIDC_PROVIDERS = {"testidp": "https://idp.invalid"}
    settings.RECKON_SSO_ONLY = True
    assert ended(client)
    assert SignInEvent.objects.filter(kind=SignInEvent.SIGNED_OUT, username="olga",
                                      detail__contains="password sign-in is off (RECKON_SSO_ONLY)").exists()
    assert glass.get("/").status_code == 200


def test_a_break_glass_session_has_its_own_shorter_bound(db, settings):
    settings.RECKON_BREAK_GLASS_SESSION_S, settings.RECKON_PASSWORD_SESSION_S = 300, 3600
    user = User.objects.create_superuser("breakglass", password="pw-olga")  # nosec B106  # the test's own password
    client = signed_in_client(user)
    session = client.session
    session[BREAK_GLASS_KEY] = True
    session.save()
    age_session(client, 301)
    assert ended(client)
    assert SignInEvent.objects.filter(kind=SignInEvent.SIGNED_OUT, username="breakglass",
                                      detail__contains="a break-glass session lasts at most 300 s").exists()
