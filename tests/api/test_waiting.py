"""api.waiting: one LISTEN per process wakes the waiting claims whose scope a notification covers,
comes back after losing its connection (waking everyone, since something may have been missed),
and holds no more waits than the process may."""

from __future__ import annotations

import pytest
from django.db import connection

from api.waiting import ClaimWaits
from ledger.services.claimable import notify_claimable
from tests.processes import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def waits():
    hub = ClaimWaits(limit=lambda: 2)
    yield hub
    hub.stop()  # its connection must be gone before the test database is dropped


def _notify(*pairs) -> None:
    notify_claimable(set(pairs))  # autocommit: delivered at once


def test_a_notification_wakes_only_the_waiters_it_concerns(waits):
    with waits.waiter(lambda tenant, action: tenant == "acme") as acme, \
            waits.waiter(lambda tenant, action: action == "ext.beta") as beta:
        wait_for(waits.listening.is_set, timeout=10, message="the listener to listen")
        for waiter in (acme, beta):
            waiter.wait(5)  # the wake-up everyone gets when listening starts
            waiter.arm()
        _notify(("acme", "ext.alpha"))
        assert acme.wait(5)
        assert not beta.wait(0.3)  # nothing for it: it is still asleep (its own poll would wake it)
        acme.arm()
        _notify(("gamma", "ext.beta"))
        assert beta.wait(5) and not acme.wait(0.3)


def test_it_holds_no_more_waits_than_allowed(waits):
    with waits.waiter(lambda *_: True) as first, waits.waiter(lambda *_: True) as second, \
            waits.waiter(lambda *_: True) as third:
        assert first is not None and second is not None and third is None
        assert waits.waiting == 2
    assert waits.waiting == 0


def test_after_losing_its_connection_it_listens_again_and_wakes_everyone(waits):
    with waits.waiter(lambda *_: False) as waiter:  # a notification never concerns it
        wait_for(waits.listening.is_set, timeout=10, message="the listener to listen")
        waiter.wait(5)
        waiter.arm()
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                           "WHERE application_name LIKE 'reckon:claims-listener:%%'")
            assert cursor.fetchone()[0]
        assert waiter.wait(15)  # woken by the listener's return: work may have come meanwhile
        wait_for(waits.listening.is_set, timeout=10, message="the listener to listen again")
