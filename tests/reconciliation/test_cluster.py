"""End to end in a real django-q2 cluster: unknown work is reconciled within seconds."""

import pytest

from ledger.models import Job, LedgerEvent
from tests.conftest import make_job, sandbox_env
from tests.processes import qcluster, wait_for
from tests.reconciliation.helpers import MAIL, assert_ledger_clean

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_unknown_jobs_are_reconciled_automatically_within_seconds(provider, settings):
    settings.RECKON_DISPATCH = True
    # Every send commits at the provider and then loses its answer: the production duplicate trap.
    provider.request("PUT", "/_admin/faults", {"rates": {"drop_after_commit": 1.0}})
    for n in range(6):
        make_job(f"e2e-{n}", action="mail.send", payload={**MAIL, "body": f"order {n}"})
    with qcluster(workers=2, env=sandbox_env(provider)) as cluster:
        wait_for(
            lambda: set(Job.objects.values_list("status", flat=True)) == {"succeeded"},
            timeout=45,
            message=f"all jobs reconciled\n{cluster.output()[-1500:]}",
        )
    for n in range(6):
        events = {e.kind: e.at for e in LedgerEvent.objects.filter(job__job_id=f"e2e-{n}")}
        assert "observation_lost" in events and "reconciled_confirmed" in events
        lag = (events["reconciled_confirmed"] - events["observation_lost"]).total_seconds()
        assert lag < 10, f"e2e-{n} waited {lag:.1f} s for reconciliation"  # not the minute schedule
        assert provider.effects(marker=f"mail.send:e2e-{n}")["count"] == 1
    assert_ledger_clean()
