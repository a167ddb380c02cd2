"""Signing in through a real OpenID Connect provider (tests/oidc: the oidc-provider package in a
process of its own), in the browser: the happy path with the group mapping, a group taken away at
the provider, SSO only with a break-glass account and its TOTP code, a provider that is down, and a
forged or replayed callback."""

from __future__ import annotations

import re

import pytest
from allauth.mfa.totp.internal.auth import TOTP, format_hotp_value, hotp_value, yield_hotp_counters_from_time
from allauth.socialaccount.models import SocialAccount
from django.contrib.auth.models import User
from playwright.sync_api import expect

from config.settings import oidc_apps
from console.models import SignInEvent, TenantScope
from tests.oidc.harness import CLIENT_ID, CLIENT_SECRET, IdentityProvider

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

PROVIDER = "testidp"
USERS = {
    "alice": {"password": "alice-at-the-idp", "name": "Alice Adams", "groups": ["reckon-operators", "reckon-approvers"]},
    "bob": {"password": "bob-at-the-idp", "groups": ["payroll"]},
}
BREAK_GLASS_SECRET = "JBSWY3DPEHPK3PXPJBSWY3DPEHPK3PXP"  # nosec B105  # the test's own TOTP secret


@pytest.fixture(scope="module")
def identity_provider(live_server, tmp_path_factory):
    provider = IdentityProvider(tmp_path_factory.mktemp("oidc"), users=USERS,
                                redirect_uris=[f"{live_server.url}/accounts/oidc/{PROVIDER}/login/callback/"])
    provider.start()
    yield provider
    provider.stop()


@pytest.fixture
def sso(identity_provider, settings):
    """Reckon configured for the test provider, as the README's settings configure Keycloak."""
    identity_provider.set_users(USERS)
    settings.RECKON_OIDC_PROVIDERS = {PROVIDER: identity_provider.issuer}
    settings.RECKON_OIDC_NAMES = {PROVIDER: "Test IdP"}
    settings.RECKON_OIDC_CLIENT_IDS = {PROVIDER: CLIENT_ID}
    settings.RECKON_OIDC_CLIENT_SECRETS = {PROVIDER: CLIENT_SECRET}
    settings.RECKON_OIDC_GROUP_ROLES = {"reckon-operators": frozenset({"operators"}),
                                        "reckon-approvers": frozenset({"approvers"}),
                                        "reckon-auditors": frozenset({"auditors"})}
    settings.RECKON_OIDC_GROUP_TENANTS = {"reckon-operators": frozenset({"acme", "globex"}),
                                          "reckon-auditors": frozenset({"*"})}
    settings.SOCIALACCOUNT_PROVIDERS = {"openid_connect": {
        "OAUTH_PKCE_ENABLED": True, "SCOPE": ["openid", "profile", "email", "groups"],
        "APPS": oidc_apps(settings.RECKON_OIDC_PROVIDERS, settings.RECKON_OIDC_NAMES,
                          settings.RECKON_OIDC_CLIENT_IDS, settings.RECKON_OIDC_CLIENT_SECRETS)}}
    return identity_provider


@pytest.fixture
def new_page(browser, live_server):
    contexts = []

    def new_page():
        context = browser.new_context(viewport={"width": 1400, "height": 900})
        contexts.append(context)
        return context.new_page()

    yield new_page
    for context in contexts:
        context.close()


def sign_in_through_provider(page, live_server, username: str, *, password: str | None = None):
    page.goto(f"{live_server.url}/accounts/login/")
    page.get_by_role("button", name="Sign in with Test IdP").click()
    page.wait_for_url(lambda url: "/interaction/" in url or (url.startswith(live_server.url) and "/accounts/" not in url))
    if page.url.startswith(live_server.url):  # the provider remembered the person: no form
        return
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password or USERS[username]["password"])
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(re.compile(re.escape(live_server.url) + ".*"))


def roles(username: str) -> set[str]:
    return set(User.objects.get(username=username).groups.values_list("name", flat=True))


def test_a_person_signs_in_through_the_provider_with_roles_and_tenants_from_its_groups(sso, new_page, live_server):
    page = new_page()
    sign_in_through_provider(page, live_server, "alice")
    page.wait_for_url(f"{live_server.url}/")
    expect(page.get_by_role("heading", level=1)).to_be_visible()
    alice = User.objects.get(username="alice")
    assert roles("alice") == {"operators", "approvers"}
    scope = TenantScope.objects.get(user=alice)
    assert (scope.all_tenants, scope.tenants) == (False, ["acme", "globex"])
    assert SocialAccount.objects.get(user=alice).uid == "alice"
    event = SignInEvent.objects.get(kind=SignInEvent.SIGNED_IN, username="alice")
    assert (event.method, event.issuer, event.subject) == (PROVIDER, sso.issuer, "alice")
    assert not alice.has_usable_password()  # no password to guess: the provider is the way in

    # The sign-in is on the audit trail, for those who see every tenant.
    auditor = new_page()
    sso.set_users({**USERS, "carol": {"password": "carol-at-the-idp", "groups": ["reckon-auditors"]}})
    sign_in_through_provider(auditor, live_server, "carol", password="carol-at-the-idp")
    auditor.goto(f"{live_server.url}/audit/")
    trail = auditor.locator("#sign-in-trail")
    expect(trail.locator(f"tr[data-sign-in='{event.pk}']")).to_contain_text("alice")
    expect(trail.locator(f"tr[data-sign-in='{event.pk}']")).to_contain_text(f"subject alice at {sso.issuer}")


def test_a_group_taken_away_at_the_provider_takes_the_role_away(sso, new_page, live_server, settings):
    page = new_page()
    sign_in_through_provider(page, live_server, "alice")
    page.wait_for_url(f"{live_server.url}/")
    assert roles("alice") == {"operators", "approvers"}

    sso.set_users({**USERS, "alice": {**USERS["alice"], "groups": ["reckon-auditors"]}})
    # The open session is sent back through the provider once its re-validation age has passed
    # (made 0 here instead of waiting 15 minutes); the provider still knows her: no form.
    settings.RECKON_OIDC_REVALIDATE_S = 0
    page.goto(f"{live_server.url}/queue/")
    page.wait_for_url(re.compile(r".*/accounts/login/\?.*again=testidp.*"))
    expect(page.get_by_role("status")).to_contain_text("checked again every")
    assert SignInEvent.objects.filter(kind=SignInEvent.SIGNED_OUT, username="alice",
                                      detail__contains="checked again").exists()
    settings.RECKON_OIDC_REVALIDATE_S = 900
    page.get_by_role("button", name="Sign in with Test IdP").click()
    page.wait_for_url(f"{live_server.url}/queue/")
    assert roles("alice") == {"auditors"}
    scope = TenantScope.objects.get(user__username="alice")
    assert scope.all_tenants is True

    # Every group gone: no role at all, and the person is told whom to ask.
    sso.set_users({**USERS, "alice": {**USERS["alice"], "groups": []}})
    settings.RECKON_OIDC_REVALIDATE_S = 0
    page.goto(f"{live_server.url}/")
    settings.RECKON_OIDC_REVALIDATE_S = 900
    page.get_by_role("button", name="Sign in with Test IdP").click()
    page.wait_for_url(f"{live_server.url}/")
    assert roles("alice") == set()
    expect(page.get_by_role("alert")).to_contain_text("You have no role here; ask your Reckon administrator")


def test_a_person_without_a_mapped_group_has_no_role(sso, new_page, live_server):
    page = new_page()
    sign_in_through_provider(page, live_server, "bob")
    expect(page.get_by_role("alert")).to_contain_text("You have no role here; ask your Reckon administrator")
    assert roles("bob") == set()
    assert page.goto(f"{live_server.url}/queue/").status == 403

    # An account switched off in /admin/ stays off, whatever the provider says.
    User.objects.filter(username="bob").update(is_active=False)
    fresh = new_page()
    sign_in_through_provider(fresh, live_server, "bob")
    expect(fresh.get_by_role("alert")).to_contain_text("The Reckon account bob is switched off")
    assert SignInEvent.objects.filter(kind=SignInEvent.FAILED, username="bob", detail__contains="inactive").exists()


def current_code(secret: str) -> str:
    return format_hotp_value(hotp_value(secret, next(yield_hotp_counters_from_time())))


@pytest.fixture
def break_glass(settings):
    settings.RECKON_SSO_ONLY = True
    settings.RECKON_BREAK_GLASS_ACCOUNTS = ["breakglass"]
    user = User.objects.create_superuser("breakglass", password="pw-breakglass-long")
    TOTP.activate(user, BREAK_GLASS_SECRET)
    User.objects.create_user("olga", password="pw-olga")
    return user


def password_sign_in(page, live_server, username: str, password: str):
    page.goto(f"{live_server.url}/accounts/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()


def test_sso_only_refuses_passwords_but_a_break_glass_account_gets_in_with_its_totp_code(
        sso, break_glass, new_page, live_server):
    page = new_page()
    password_sign_in(page, live_server, "olga", "pw-olga")
    expect(page.get_by_role("alert")).to_contain_text("Password sign-in is off here: sign in through Test IdP.")
    assert SignInEvent.objects.filter(kind=SignInEvent.FAILED, username="olga", detail__contains="RECKON_SSO_ONLY").exists()

    password_sign_in(page, live_server, "breakglass", "pw-breakglass-long")
    page.wait_for_url(f"{live_server.url}/accounts/login/code/")
    page.get_by_label("TOTP code").fill("000000" if current_code(BREAK_GLASS_SECRET) != "000000" else "111111")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_contain_text("wrong")
    assert not SignInEvent.objects.filter(kind=SignInEvent.BREAK_GLASS).exists()
    page.get_by_label("TOTP code").fill(current_code(BREAK_GLASS_SECRET))
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{live_server.url}/")
    event = SignInEvent.objects.get(kind=SignInEvent.BREAK_GLASS)
    assert event.username == "breakglass"

    # /admin/ signs in on the same page: no password form of its own.
    other = new_page()
    other.goto(f"{live_server.url}/admin/")
    other.wait_for_url(re.compile(r".*/accounts/login/\?next=/admin/"))
    expect(other.get_by_role("button", name="Sign in with Test IdP")).to_be_visible()


def test_a_provider_that_is_down_gets_a_clear_message_and_break_glass_still_works(
        sso, break_glass, new_page, live_server):
    sso.stop()
    try:
        page = new_page()
        page.goto(f"{live_server.url}/accounts/login/")
        page.get_by_role("button", name="Sign in with Test IdP").click()
        expect(page.get_by_role("heading", level=1)).to_have_text("Test IdP did not answer")
        expect(page.get_by_role("alert")).to_contain_text("could not reach the identity provider")
        assert SignInEvent.objects.filter(kind=SignInEvent.FAILED, method=PROVIDER, detail__contains="did not answer").exists()

        password_sign_in(page, live_server, "breakglass", "pw-breakglass-long")
        page.get_by_label("TOTP code").fill(current_code(BREAK_GLASS_SECRET))
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(f"{live_server.url}/")
    finally:
        sso.start()


def test_a_forged_or_replayed_callback_is_refused(sso, new_page, live_server):
    page = new_page()
    forged = f"{live_server.url}/accounts/oidc/{PROVIDER}/login/callback/?code=forged&state=forged"
    assert page.goto(forged).status == 401
    expect(page.get_by_role("alert")).to_contain_text("does not belong to a sign-in started here")
    assert page.goto(f"{live_server.url}/").url.startswith(f"{live_server.url}/accounts/login/")

    callbacks = []
    page.on("request", lambda request: callbacks.append(request.url) if "/login/callback/" in request.url else None)
    sign_in_through_provider(page, live_server, "alice")
    page.wait_for_url(f"{live_server.url}/")
    assert len(callbacks) == 1
    before = SignInEvent.objects.filter(kind=SignInEvent.SIGNED_IN).count()

    # The same answer again, in the session that used it and in another browser: refused both times.
    assert page.goto(callbacks[0]).status == 401
    other = new_page()
    assert other.goto(callbacks[0]).status == 401
    expect(other.get_by_role("alert")).to_contain_text("already used")
    assert other.goto(f"{live_server.url}/").url.startswith(f"{live_server.url}/accounts/login/")
    assert SignInEvent.objects.filter(kind=SignInEvent.SIGNED_IN).count() == before
    assert SignInEvent.objects.filter(kind=SignInEvent.FAILED, method=PROVIDER,
                                      detail__contains="forged or replayed").count() >= 3
