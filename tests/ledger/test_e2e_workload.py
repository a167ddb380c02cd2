"""A mixed workload under injected provider faults, through real qcluster workers and a real sandbox."""

import sys

import pytest
from django.core.management import call_command

from ledger.invariants import find_violations
from ledger.models import Job
from sandbox.simulation import ACTIONS
from tests.conftest import sandbox_env
from tests.processes import ROOT, ManagedProcess, database_url_of_tests, qcluster, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

SETTLED = {"succeeded", "failed", "needs_reconciliation", "needs_operator", "escalated", "awaiting_approval",
           "blocked", "cancelled"}


def test_every_job_settles_with_a_reason_and_no_key_has_two_effects(provider, settings, capsys):
    settings.RECKON_DISPATCH = True
    call_command("simulate", jobs=32, fault_rate=0.3, mismatch_rate=0.5, seed=7, prefix="e2e")
    assert "enqueued 32 jobs" in capsys.readouterr().out
    # The sweeper's loop, as in a deployment: it dispatches the retries that waited for their backoff
    # (the vault's "nothing was done" answers are retried, not handed to a person).
    sweeper = ManagedProcess([sys.executable, str(ROOT / "manage.py"), "sweep_leases", "--loop", "--interval", "0.5"],
                             env={"DATABASE_URL": database_url_of_tests(), **sandbox_env(provider)}, log_name="sweeper")
    with qcluster(workers=2, env=sandbox_env(provider)) as cluster, sweeper:
        wait_for(lambda: set(Job.objects.filter(job_id__startswith="e2e-").values_list("status", flat=True)) <= SETTLED,
                 timeout=90, message="every job to settle")
    jobs = list(Job.objects.filter(job_id__startswith="e2e-"))
    assert len(jobs) == 32
    assert {job.action for job in jobs} == set(ACTIONS)
    statuses = {job.status for job in jobs}
    assert "succeeded" in statuses, cluster.output()[-3000:]
    assert "blocked" in statuses  # the switched profiles
    for job in jobs:
        if job.status != "succeeded":
            last = job.events.order_by("-id").first()
            assert last.note or last.evidence, f"{job.job_id} is {job.status} without a reason"
        effects = provider.effects(marker=job.idempotency_key)["count"]
        assert effects <= 1, f"{job.job_id} has {effects} effects at the provider"
        if job.status == "succeeded":
            assert effects == 1, f"{job.job_id} succeeded but the provider shows {effects} effects"
        if job.status in ("blocked", "failed"):
            assert effects == 0, f"{job.job_id} is {job.status} but the provider shows an effect"
    assert not [f for f in find_violations() if f.count]
