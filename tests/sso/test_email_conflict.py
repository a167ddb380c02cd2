"""Issue 42, item 4: a first sign-in through a real OpenID Connect provider (tests/oidc, in its own
process) whose e-mail address an existing account has. It used to answer 500 (allauth sends the
person to a sign-up form Reckon does not route); now the person gets a page that says what to do,
the refusal is on the sign-in trail, and nothing is made or linked by e-mail address. Once an
administrator attaches the provider subject to the account, the next sign-in opens it."""

from __future__ import annotations

import re

import pytest
import requests
from allauth.socialaccount.models import SocialAccount
from django.contrib.auth.models import User
from django.core.management import call_command

from approvals.identities import identities_of
from config.settings import oidc_apps
from console.models import SignInEvent
from tests.oidc.harness import CLIENT_ID, CLIENT_SECRET, IdentityProvider

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

PROVIDER = "testidp"
USERS = {"op_a": {"password": "op-a-at-the-idp", "email": "op_a@example.test", "groups": ["reckon-operators"]},
         "op_b": {"password": "op-b-at-the-idp", "email": "op_b@example.test", "groups": ["reckon-operators"]}}


@pytest.fixture(scope="module")
def identity_provider(live_server, tmp_path_factory):
    provider = IdentityProvider(tmp_path_factory.mktemp("oidc"), users=USERS,
                                redirect_uris=[f"{live_server.url}/accounts/oidc/{PROVIDER}/login/callback/"])
    provider.start()
    yield provider
    provider.stop()


@pytest.fixture
def sso(identity_provider, settings):
    settings.RECKON_OIDC_PROVIDERS = {PROVIDER: identity_provider.issuer}
    settings.RECKON_OIDC_NAMES = {PROVIDER: "Test IdP"}
    settings.RECKON_OIDC_CLIENT_IDS = {PROVIDER: CLIENT_ID}
    settings.RECKON_OIDC_CLIENT_SECRETS = {PROVIDER: CLIENT_SECRET}
    settings.RECKON_OIDC_GROUP_ROLES = {"reckon-operators": frozenset({"operators"})}
    settings.RECKON_OIDC_GROUP_TENANTS = {"reckon-operators": frozenset({"acme"})}
    settings.SOCIALACCOUNT_PROVIDERS = {"openid_connect": {
        "OAUTH_PKCE_ENABLED": True, "SCOPE": ["openid", "profile", "email", "groups"],
        "APPS": oidc_apps(settings.RECKON_OIDC_PROVIDERS, settings.RECKON_OIDC_NAMES,
                          settings.RECKON_OIDC_CLIENT_IDS, settings.RECKON_OIDC_CLIENT_SECRETS)}}
    return identity_provider


def sign_in_through_provider(live_server, username: str) -> requests.Response:
    """A fresh client: Reckon's sign-in page, its provider button, the provider's form, back to Reckon."""
    browser = requests.Session()
    page = browser.get(f"{live_server.url}/accounts/login/", timeout=30)
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    form = browser.post(f"{live_server.url}/accounts/oidc/{PROVIDER}/login/", data={"csrfmiddlewaretoken": token},
                        headers={"Referer": page.url}, timeout=30)
    assert "/interaction/" in form.url, form.text[-2000:]
    answer = browser.post(form.url, data={"login": username, "password": USERS[username]["password"]}, timeout=30)
    answer.browser = browser
    return answer


def test_a_first_sign_in_with_an_e_mail_an_account_has_gets_a_page_and_the_trail_not_a_500(sso, live_server):
    local = User.objects.create_user("op_a", email="op_a@example.test", password="pw-op_a-local")

    answer = sign_in_through_provider(live_server, "op_a")

    assert answer.status_code == 409 and answer.url.startswith(f"{live_server.url}/accounts/oidc/{PROVIDER}/")
    assert "Ask an administrator to link your accounts" in answer.text
    assert "already has an account with the e-mail address op_a@example.test" in answer.text
    assert "<code>op_a</code>" in answer.text  # the subject the administrator needs
    assert list(User.objects.values_list("username", flat=True)) == ["op_a"]  # no twin made
    assert not SocialAccount.objects.exists()  # and nothing linked by e-mail address
    assert answer.browser.get(f"{live_server.url}/queue/", timeout=30).url.startswith(
        f"{live_server.url}/accounts/login/")  # not signed in
    event = SignInEvent.objects.get(kind=SignInEvent.FAILED, method=PROVIDER)
    assert (event.username, event.issuer, event.subject) == ("op_a", sso.issuer, "op_a")
    assert "no account was made or linked" in event.detail and "link_accounts subject op_a" in event.detail

    User.objects.create_superuser("root", password="pw-root-long")
    call_command("link_accounts", "subject", "op_a", "--provider", PROVIDER, "--subject", "op_a", "--by", "root")
    again = sign_in_through_provider(live_server, "op_a")

    assert again.status_code == 200 and again.url == f"{live_server.url}/"
    signed_in = SignInEvent.objects.get(kind=SignInEvent.SIGNED_IN)
    assert (signed_in.username, signed_in.user_pk, signed_in.method) == ("op_a", local.pk, PROVIDER)
    assert set(local.groups.values_list("name", flat=True)) == {"operators"}  # the provider's groups apply


def test_a_twin_made_at_a_first_sign_in_is_linked_to_the_local_account_as_one_person(sso, live_server):
    local = User.objects.create_user("op_b", password="pw-op_b-local")  # no e-mail address: no conflict

    answer = sign_in_through_provider(live_server, "op_b")

    assert answer.status_code == 200 and answer.url == f"{live_server.url}/"
    twin = User.objects.get(socialaccount__provider=PROVIDER, socialaccount__uid="op_b")
    assert twin.username == "op_b@testidp" and twin != local  # the name was taken: never joined by name
    assert identities_of(local) == [f"account:{local.pk}"]

    User.objects.create_superuser("root", password="pw-root-long")
    call_command("link_accounts", "link", "op_b", "op_b@testidp", "--by", "root")
    assert identities_of(local) == identities_of(twin) == sorted(
        [f"account:{local.pk}", f"account:{twin.pk}", f"{sso.issuer}#op_b"])
