"""The break-glass second factor cannot be guessed: wrong codes count per account in the database,
across sessions and addresses (a growing wait, an alert, failed sign-ins for django-axes and the
trail), and a code works once, whichever web process sees it."""

from datetime import timedelta

import pytest
from allauth.mfa.totp.internal.auth import TOTP, format_hotp_value, hotp_value, yield_hotp_counters_from_time
from axes.models import AccessAttempt
from django.contrib.auth.models import User
from django.db.models import F, Sum
from django.test import Client

from alerts.evaluate import evaluate_alerts
from alerts.models import AlertCondition, AlertEvent, AlertEventKind
from console.models import SignInEvent
from sso.models import CodeFailures, UsedCode
from sso.second_factor import CODE_TRIES

pytestmark = pytest.mark.django_db

SECRET = "JBSWY3DPEHPK3PXPJBSWY3DPEHPK3PXP"  # nosec B105  # the test's own TOTP secret
PASSWORD = "pw-breakglass-long"  # nosec B105  # the test's own password


@pytest.fixture
def break_glass(settings):
    settings.RECKON_OIDC_PROVIDERS = {"testidp": "https://idp.invalid"}
    settings.RECKON_OIDC_NAMES = {"testidp": "Test IdP"}
    settings.RECKON_SSO_ONLY = True
    settings.RECKON_BREAK_GLASS_ACCOUNTS = ["breakglass"]
    settings.MFA_TOTP_TOLERANCE = 1  # a step either side, as authenticator apps drift: no flake at a step's edge
    user = User.objects.create_superuser("breakglass", password=PASSWORD)
    TOTP.activate(user, SECRET)
    return user


def current_step() -> int:
    return list(yield_hotp_counters_from_time())[1]  # the middle of allauth's tolerance window


def code_at(step: int) -> str:
    return format_hotp_value(hotp_value(SECRET, step))


def wrong_code() -> str:
    valid = {code_at(step) for step in yield_hotp_counters_from_time()}
    return next(code for code in ("000000", "111111", "222222", "333333") if code not in valid)


def password_step(client: Client):
    return client.post("/accounts/login/", {"username": "breakglass", "password": PASSWORD})


def code_step(client: Client, code: str):
    return client.post("/accounts/login/code/", {"code": code})


def signed_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


def failures() -> int:
    row = CodeFailures.objects.filter(user__username="breakglass").first()
    return row.failures if row else 0


def test_sixty_wrong_codes_from_one_client_are_refused_after_the_bound_alerted_and_counted(break_glass):
    client = Client(REMOTE_ADDR="10.0.0.7")
    assert password_step(client).url == "/accounts/login/code/"
    answers = [code_step(client, wrong_code()) for _ in range(60)]

    assert [a.status_code for a in answers[:CODE_TRIES - 1]] == [400] * (CODE_TRIES - 1)
    assert all(a.status_code == 429 and int(a["Retry-After"]) > 0 for a in answers[CODE_TRIES:])
    assert failures() == CODE_TRIES  # only the first CODE_TRIES codes were looked at
    # Each of them a failed sign-in for django-axes...
    assert AccessAttempt.objects.filter(username="breakglass").aggregate(n=Sum("failures_since_start"))["n"] == CODE_TRIES
    # ...and on the trail, once each, with the refusals unchecked after them.
    trail = SignInEvent.objects.filter(kind=SignInEvent.FAILED, username="breakglass")
    assert trail.filter(detail__startswith="break-glass TOTP refused: ").count() == CODE_TRIES
    assert trail.filter(detail__startswith="break-glass TOTP refused unchecked").count() >= 1
    assert trail.count() == 60

    evaluate_alerts()
    fired = AlertEvent.objects.get(condition=AlertCondition.BREAK_GLASS_GUESSING, kind=AlertEventKind.FIRED)
    assert "breakglass 5 failed sign-ins" in fired.note
    assert password_step(client).status_code == 429  # the password step is locked for this address too

    # The right code is refused unchecked too while the account waits, and nothing is used up.
    assert code_step(client, code_at(current_step())).status_code == 429
    assert not signed_in(client) and not UsedCode.objects.exists()


def wait_passes(seconds: float) -> None:
    """Move the account's latest wrong code into the past, as if `seconds` had gone by."""
    CodeFailures.objects.update(latest_at=F("latest_at") - timedelta(seconds=seconds))


def test_the_wait_holds_across_sessions_and_addresses_and_grows(break_glass):
    for n in range(CODE_TRIES):  # a fresh session and address each time: one wrong code each
        client = Client(REMOTE_ADDR=f"10.0.1.{n}")
        password_step(client)
        # wrong; the last of them also starts the account's wait (429, Retry-After)
        assert code_step(client, wrong_code()).status_code == (400 if n < CODE_TRIES - 1 else 429)
    assert failures() == CODE_TRIES

    client = Client(REMOTE_ADDR="10.0.2.1")
    password_step(client)
    waits = []
    for _ in range(3):
        refused = code_step(client, code_at(current_step()))  # even the right code: not checked
        assert refused.status_code == 429 and "This code was not checked" in refused.content.decode()
        waits.append(int(refused["Retry-After"]))
        wait_passes(waits[-1])
        assert code_step(client, wrong_code()).status_code in (400, 429)  # checked, and wrong
    assert waits == [2, 4, 8]
    assert failures() == CODE_TRIES + 3 and not signed_in(client)

    # After the wait, the right code gets in and clears the count.
    wait_passes(16)
    fresh = Client(REMOTE_ADDR="10.0.3.1")
    password_step(fresh)
    assert code_step(fresh, code_at(current_step())).status_code == 302 and signed_in(fresh)
    assert failures() == 0


def test_a_used_code_is_refused_in_any_session_because_the_database_remembers_it(break_glass, settings):
    # No shared cache between web processes: each process's own memory, as in production.
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.dummy.DummyCache"}}
    step = current_step()
    first = Client(REMOTE_ADDR="10.0.4.1")
    password_step(first)
    assert code_step(first, code_at(step)).status_code == 302 and signed_in(first)
    assert list(UsedCode.objects.values_list("time_step", flat=True)) == [step]

    second = Client(REMOTE_ADDR="10.0.4.2")
    password_step(second)
    refused = code_step(second, code_at(step))
    assert refused.status_code == 400 and "wrong or already used" in refused.content.decode()
    assert not signed_in(second)
    # An earlier step's code, still inside the tolerance window, is refused after a later one.
    assert code_step(second, code_at(step - 1)).status_code == 400 and not signed_in(second)
    assert SignInEvent.objects.filter(kind=SignInEvent.BREAK_GLASS).count() == 1
