"""The worker loop inside real django-q2 cluster processes, on the real test database."""

import pytest
from django.core.management import call_command

from ledger import services
from ledger.invariants import find_violations
from ledger.models import Job
from tests.conftest import expire_lease, make_job
from tests.processes import qcluster, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture
def dispatching(settings):
    settings.RECKON_DISPATCH = True


def _statuses(prefix: str) -> dict[str, str]:
    return dict(Job.objects.filter(job_id__startswith=prefix).values_list("job_id", "status"))


def test_enqueued_jobs_run_to_success_in_a_real_cluster(dispatching):
    for n in range(12):
        make_job(f"e2e-{n}", payload={"n": n})
    make_job("e2e-bad", payload={"fail": "provider said no"})
    with qcluster(workers=2) as cluster:
        wait_for(lambda: all(s in ("succeeded", "failed") for s in _statuses("e2e-").values()),
                 timeout=60, message="all jobs finished")
    statuses = _statuses("e2e-")
    assert statuses.pop("e2e-bad") == "failed"
    assert set(statuses.values()) == {"succeeded"}, cluster.output()[-2000:]
    assert not [f for f in find_violations() if f.count]


def test_a_crashed_delivery_is_swept_redispatched_and_completed(settings):
    make_job("crash-1")  # not dispatched: only the sweeper can bring it back
    services.claim_job(job_id="crash-1", worker="killed-worker")  # a worker that never comes back
    expire_lease("crash-1")
    settings.RECKON_DISPATCH = True
    call_command("sweep_leases")
    with qcluster(workers=1):
        wait_for(lambda: Job.objects.get(job_id="crash-1").status == "succeeded", timeout=60,
                 message="the reclaimed job to succeed")
    kinds = list(Job.objects.get(job_id="crash-1").events.order_by("id").values_list("kind", flat=True))
    assert kinds[:4] == ["enqueued", "claimed", "lease_expired_reclaimed", "attempt_opened"]
    assert "succeeded" in kinds
    job = Job.objects.get(job_id="crash-1")
    assert job.attempts.count() == 2 and job.lease_seq == 2
    assert not [f for f in find_violations() if f.count]
