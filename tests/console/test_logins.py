"""The per-account slow-down: guessing one account's password from many addresses slows down to
one guess per bounded wait, and still cannot keep the person out of where they usually log in."""

from datetime import timedelta

import pytest
from axes.models import AccessAttempt
from django.db.models import F
from django.test import Client

pytestmark = pytest.mark.django_db

USUAL, NEW = "10.0.0.1", "10.0.9.9"


@pytest.fixture
def throttle(settings):
    """A pair locks after 3 failures; the account slows down after 4, waiting at most 8 s."""
    settings.AXES_FAILURE_LIMIT = 3
    settings.AXES_COOLOFF_TIME = timedelta(seconds=600)
    settings.RECKON_LOGIN_ACCOUNT_LIMIT = 4
    settings.RECKON_LOGIN_ACCOUNT_MAX_WAIT = 8


def _login(address: str, password: str, username: str = "olga"):
    client = Client(REMOTE_ADDR=address)
    return client, client.post("/accounts/login/", {"username": username, "password": password})


def _fail_from_many_addresses(times: int, first: int = 1):
    for n in range(first, first + times):
        _, response = _login(f"10.0.1.{n}", "guess")
        assert response.status_code in (200, 429)


def _wait_passes(seconds: float):
    """Move the account's failures into the past, as if `seconds` had gone by."""
    AccessAttempt.objects.update(attempt_time=F("attempt_time") - timedelta(seconds=seconds))


def _logged_in(client, response) -> bool:
    return response.status_code == 302 and "_auth_user_id" in client.session


def test_many_addresses_slow_an_account_down_but_not_its_usual_address(operator, throttle):
    assert _logged_in(*_login(USUAL, "pw-olga"))  # where olga usually logs in
    _fail_from_many_addresses(4)  # one failure each: no address reaches its own limit
    client, response = _login(NEW, "pw-olga")
    # The account's 2 s wait, less what passed since the last failure (over a second on a loaded machine)
    assert response.status_code == 429 and response["Retry-After"] in ("1", "2")
    page = response.content.decode()
    assert "from several addresses" in page and "Your password was not checked" in page
    assert "_auth_user_id" not in client.session
    # The person herself, from her usual address: the right password works at once.
    assert _logged_in(*_login(USUAL, "pw-olga"))
    # A wrong password from a known address is checked (and counted) as before: no wait.
    assert _login(USUAL, "wrong")[1].status_code == 200


def test_the_wait_grows_and_is_bounded(operator, throttle):
    waits = []
    for n in range(1, 12):
        _fail_from_many_addresses(1, first=n)
        _, response = _login(f"10.0.9.{n}", "guess")  # a fresh address each time: no pair's limit
        waits.append(int(response["Retry-After"]) if response.status_code == 429 else 0)
        _wait_passes(60)  # each refused attempt counts; let its wait pass before the next address
    # Each round adds two failures (the attack's and the probe's): below the account limit
    # nothing, then 4 s, then the bound (8 s here) and never beyond it.
    assert waits == [0, 0, 4] + [8] * 8


def test_after_the_wait_a_new_address_gets_in_with_the_right_password(operator, throttle):
    _fail_from_many_addresses(4)
    _, refused = _login(NEW, "pw-olga")
    assert refused.status_code == 429
    # The refused attempt counted too (as every attempt axes refuses does): the next wait is longer.
    _wait_passes(int(refused["Retry-After"]) + 1)
    assert _login("10.0.9.10", "pw-olga")[1]["Retry-After"] == "1"  # 4 s after it, not 2
    _wait_passes(8)
    assert _logged_in(*_login("10.0.9.11", "pw-olga"))


def test_an_account_below_the_limit_is_not_slowed(operator, throttle):
    _fail_from_many_addresses(3)
    assert _logged_in(*_login(NEW, "pw-olga"))
