"""A pass keeps `concurrency` lookups in flight, however small its batches: it claims ahead by
what is still being looked up, not by what is waiting to be applied."""

import threading
from datetime import timedelta

import pytest

from ledger.actions import Action, _registry, register
from ledger.models import Job
from reconciliation import passes
from reconciliation.findings import Finding
from reconciliation.models import CheckOutcome
from sandbox.demo_actions import send_mail
from tests.reconciliation.helpers import MAIL, assert_ledger_clean, unknown_job

pytestmark = pytest.mark.django_db

IN_FLIGHT = 8
EIGHT = threading.Barrier(IN_FLIGHT)


def eight_at_once(job, attempt):
    """Confirms only if seven other lookups are in flight at the same moment."""
    EIGHT.wait(timeout=20)
    return Finding(CheckOutcome.CONFIRMED, "seen while seven others were looking", result_ref=f"ref-{job.job_id}")


@pytest.fixture
def eight_at_once_action():
    register(Action(name="test.eight", executor=send_mail, queryable=True, lease_ttl=timedelta(seconds=30),
                    reconciler="tests.reconciliation.test_in_flight.eight_at_once"))
    yield
    _registry.pop("test.eight")


def test_batches_smaller_than_the_concurrency_still_keep_every_lookup_thread_busy(eight_at_once_action):
    EIGHT.reset()
    for n in range(2 * IN_FLIGHT):
        unknown_job(f"e{n}", "test.eight", MAIL)
    # Batches of 3: a pass that waited for its batches to be applied before claiming more would
    # never have 8 lookups in flight, and every lookup would time out at the barrier.
    decisions = passes.reconcile_until_idle(limit=3, concurrency=IN_FLIGHT)
    assert sorted(d.applied for d in decisions) == ["succeeded"] * (2 * IN_FLIGHT), decisions
    assert set(Job.objects.values_list("status", flat=True)) == {"succeeded"}
    assert_ledger_clean()
