"""The overview's jobs by status at scale: open jobs counted at each view, finished jobs (most of
a large history) taken from the latest sample, per tenant, and said to be so."""

from __future__ import annotations

import pytest

from alerts.sampling import sample_levels
from ledger import services
from tests.conftest import make_job
from tests.console.conftest import with_tenants

pytestmark = pytest.mark.django_db


def _succeed(job_id: str, tenant: str = "acme") -> None:
    make_job(job_id, tenant=tenant)
    lease = services.claim_job(job_id=job_id, worker="w")
    services.begin_side_effect(lease=lease)
    services.record_success(lease=lease, result_ref=f"ref-{job_id}")


def test_finished_jobs_come_from_the_latest_sample_and_open_ones_are_counted_now(client, auditor):
    _succeed("done-1")
    _succeed("done-2", tenant="globex")
    client.force_login(auditor)
    html = client.get("/").content.decode()
    assert 'data-status="succeeded">2<' in html and "as counted" not in html  # no sample yet: counted now

    sample_levels()
    _succeed("done-3")  # after the sample: not in the finished count until the next one
    make_job("waiting")
    html = client.get("/").content.decode()
    assert 'data-status="succeeded">2<' in html and 'data-status="pending">1<' in html
    assert "finished jobs as counted just now" in html

    sample_levels()
    assert 'data-status="succeeded">3<' in client.get("/").content.decode()


def test_a_fenced_user_gets_the_finished_jobs_of_their_tenants(client, auditor):
    _succeed("done-1")
    _succeed("done-2", tenant="globex")
    sample_levels()
    client.force_login(with_tenants(auditor, "globex"))
    html = client.get("/").content.decode()
    assert 'data-status="succeeded">1<' in html
