"""Back-off between lookups that said nothing definite, and the bound that hands over to a person."""

import pytest

from ledger.models import Job, LedgerEvent
from reconciliation.applying import backoff_seconds
from reconciliation.models import ReconciliationCheck
from reconciliation.passes import reconcile_job
from sandbox.testing import free_port
from tests.reconciliation.helpers import MAIL, assert_ledger_clean, make_due, unknown_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def backoff(settings):
    settings.RECKON_RECONCILE_BACKOFF_BASE = 2.0
    settings.RECKON_RECONCILE_BACKOFF_CAP = 10.0
    settings.RECKON_RECONCILE_MAX_CHECKS = 6
    # The provider's circuit would stop asking after 5 failures in a row (ledger.budget), and a
    # look not asked does not count: here the bound of one job's looks is under test.
    settings.RECKON_PROVIDER_CIRCUIT_FAILURES = 100


def test_the_delay_doubles_with_jitter_up_to_the_cap(backoff):
    for n, full in [(1, 2), (2, 4), (3, 8), (4, 10), (9, 10)]:
        delays = [backoff_seconds(n) for _ in range(200)]
        assert all(full / 2 <= d <= full for d in delays), (n, min(delays), max(delays))
        assert max(delays) - min(delays) > full / 10  # jitter spreads a herd of checks


def test_lookups_back_off_then_hand_the_job_to_an_operator(provider, settings, backoff):
    unknown_job("m1", "mail.send", MAIL)
    settings.RECKON_MAIL_URL = f"http://127.0.0.1:{free_port()}"
    delays = []
    for n in range(1, 6):
        make_due("m1")
        decision = reconcile_job(job_id="m1")
        assert decision.outcome == "unavailable" and decision.applied.startswith("retry in")
        event = LedgerEvent.objects.filter(job__job_id="m1", kind="reconciliation_unavailable").last()
        job = Job.objects.get(job_id="m1")
        assert job.check_count == n and job.status == "needs_reconciliation"
        delays.append((job.next_check_at - event.at).total_seconds())
    # Each delay lies in [d/2, d] for d = 2, 4, 8, 10, 10 (small slack for the event's clock).
    for delay, full in zip(delays, [2, 4, 8, 10, 10], strict=True):
        assert full / 2 - 0.5 <= delay <= full + 0.01, delays
    assert delays[0] < delays[2]
    make_due("m1")
    decision = reconcile_job(job_id="m1")
    assert decision.applied == "needs_operator"
    job = Job.objects.get(job_id="m1")
    assert job.status == "needs_operator" and job.next_check_at is None
    assert ReconciliationCheck.objects.filter(job=job).count() == 6
    gave_up = LedgerEvent.objects.get(job=job, kind="reconciliation_gave_up")
    assert "6 lookups gave no definite answer" in gave_up.note
    assert job.attempts.get().execution_state == "unknown"
    assert_ledger_clean()
