"""Two reconciliation passes at once, each on its own connection: no job is looked at twice."""

import threading
from collections import Counter

import pytest
from django.db import connection

from ledger.models import Job
from reconciliation.models import ReconciliationCheck
from reconciliation.passes import reconcile_until_idle
from tests.reconciliation.helpers import MAIL, assert_ledger_clean, send_message, unknown_job

pytestmark = pytest.mark.django_db(transaction=True)


def test_parallel_passes_never_check_one_job_twice(provider):
    for n in range(40):
        unknown_job(f"m{n}", "mail.send", MAIL)
        if n % 2:
            send_message(provider, f"mail.send:m{n}")
    barrier = threading.Barrier(3)
    results, errors = [[], []], []

    def run_pass(index):
        try:
            barrier.wait(timeout=30)
            results[index] = reconcile_until_idle(limit=15)  # small batches: both passes overlap
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run_pass, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    barrier.wait(timeout=30)
    for thread in threads:
        thread.join(timeout=60)
    assert not errors and not any(t.is_alive() for t in threads)
    checks = Counter(ReconciliationCheck.objects.values_list("job__job_id", flat=True))
    assert len(checks) == 40 and set(checks.values()) == {1}
    assert all(results), "both passes took part"
    assert len(results[0]) + len(results[1]) == 40
    statuses = Counter(Job.objects.values_list("status", flat=True))
    assert statuses == {"succeeded": 20, "pending": 20}
    assert_ledger_clean()
