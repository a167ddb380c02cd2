"""The sign-in settings: parsed strictly, refused when they cannot work, and nothing changes when
no identity provider is configured."""

import os

import pytest
from allauth.mfa.adapter import get_adapter
from allauth.mfa.models import Authenticator
from allauth.mfa.totp.internal.auth import (
    format_hotp_value,
    hotp_value,
    validate_totp_code,
    yield_hotp_counters_from_time,
)
from django.contrib.auth.models import User
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command

from config.env import Pairs, Sets
from tests.processes import manage


def test_provider_pairs_and_group_mappings_parse_and_refuse_bad_items():
    assert Pairs("X", "corp=https://sso.example.com/realms/a, eu=https://id.eu") == {
        "corp": "https://sso.example.com/realms/a", "eu": "https://id.eu"}
    assert Pairs("X", "corp=abc==") == {"corp": "abc=="}  # a secret may end in padding
    assert Sets("X", "ops=operators|approvers,audit=auditors") == {
        "ops": frozenset({"operators", "approvers"}), "audit": frozenset({"auditors"})}
    with pytest.raises(ValueError, match="X takes NAME=VALUE items"):
        Pairs("X", "https://sso.example.com")


def env(**values: str) -> dict:
    return {**os.environ, "RECKON_DEBUG": "true", **values}


def test_a_mapping_to_a_role_reckon_does_not_have_stops_start_up():
    run = manage("check", env=env(RECKON_OIDC_GROUP_ROLES="admins=superusers"))
    assert run.returncode != 0
    assert "RECKON_OIDC_GROUP_ROLES maps admins to superusers: Reckon's roles are approvers, auditors, operators" in run.stderr


def test_a_provider_without_its_client_and_sso_only_without_a_provider_stop_start_up():
    run = manage("check", env=env(RECKON_OIDC_PROVIDERS="corp=https://sso.example.com",
                                  RECKON_OIDC_CLIENT_IDS="corp=reckon"))
    assert "identity provider corp (RECKON_OIDC_PROVIDERS) has no entry in RECKON_OIDC_CLIENT_SECRETS" in run.stderr
    run = manage("check", env=env(RECKON_SSO_ONLY="true"))
    assert "RECKON_SSO_ONLY is on but RECKON_OIDC_PROVIDERS names no identity provider" in run.stderr


@pytest.mark.django_db
def test_without_a_provider_the_sign_in_page_is_the_password_form_as_before(client):
    page = client.get("/accounts/login/").content.decode()
    assert "Sign in with" not in page and 'name="password"' in page
    assert client.get("/admin/login/").status_code == 200  # /admin/ keeps its own form


@pytest.mark.django_db
def test_break_glass_totp_gives_the_account_an_authenticator_and_prints_its_secret_once(capsys):
    User.objects.create_user("breakglass", password="pw-breakglass-long")
    call_command("break_glass_totp", "breakglass")
    out = capsys.readouterr().out
    secret = out.split("secret: ", 1)[1].split()[0]
    assert "otpauth://totp/Reckon%3Abreakglass?secret=" in out
    assert Authenticator.objects.filter(user__username="breakglass", type="totp").count() == 1
    code = format_hotp_value(hotp_value(secret, next(yield_hotp_counters_from_time())))
    assert validate_totp_code(secret, code)
    call_command("break_glass_totp", "breakglass")  # replaced, not added
    assert Authenticator.objects.filter(user__username="breakglass", type="totp").count() == 1


@pytest.mark.django_db
def test_a_totp_secret_is_stored_encrypted_and_read_across_a_key_rotation(capsys, settings):
    User.objects.create_user("breakglass", password="pw-breakglass-long")
    call_command("break_glass_totp", "breakglass")
    secret = capsys.readouterr().out.split("secret: ", 1)[1].split()[0]
    authenticator = Authenticator.objects.get(user__username="breakglass", type="totp")
    stored = authenticator.data["secret"]
    assert stored.startswith("fernet:") and secret not in stored  # a copy of the database shows no secret
    code = format_hotp_value(hotp_value(secret, next(yield_hotp_counters_from_time())))
    assert authenticator.wrap().validate_code(code)

    old_key = settings.SECRET_KEY
    settings.SECRET_KEY, settings.SECRET_KEY_FALLBACKS = "a-rotated-key-" + "x" * 40, [old_key]
    assert get_adapter().decrypt(stored) == secret  # rotated, with the old key kept as a fallback
    settings.SECRET_KEY_FALLBACKS = []
    with pytest.raises(ImproperlyConfigured, match="list the old key in SECRET_KEY_FALLBACKS"):
        get_adapter().decrypt(stored)

@pytest.mark.django_db
def test_a_secret_stored_in_the_clear_before_encryption_is_still_read():
    user = User.objects.create_user("breakglass", password="pw-breakglass-long")
    secret = "JBSWY3DPEHPK3PXPJBSWY3DPEHPK3PXP"  # nosec B105  # the test's own TOTP secret
    authenticator = Authenticator.objects.create(user=user, type="totp", data={"secret": secret})
    code = format_hotp_value(hotp_value(secret, next(yield_hotp_counters_from_time())))
    assert authenticator.wrap().validate_code(code)
