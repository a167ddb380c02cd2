"""The simulated workload is the demo's: it says so when the demo's actions are not configured."""

import pytest
from django.core.management import CommandError, call_command

from ledger.models import Job


@pytest.mark.django_db
def test_simulate_refuses_when_the_demo_actions_are_not_configured(settings):
    settings.RECKON_ACTION_MODULES = []
    with pytest.raises(CommandError, match="set RECKON_DEMO=true"):
        call_command("simulate", jobs=4)
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_with_smtp_the_workload_sends_mail_over_smtp_under_the_smtp_sandbox_s_faults(provider, smtp_sandbox):
    from ledger.runtime import run_job
    from ledger.smtp import message_id_for
    from reconciliation.passes import reconcile_job
    from tests.reconciliation.helpers import assert_ledger_clean

    call_command("simulate", jobs=40, fault_rate=0.6, seed=6, prefix="smtp", smtp=True)
    jobs = list(Job.objects.filter(action="smtp.send_mail"))
    assert len(jobs) == 8  # one job in five
    assert smtp_sandbox.request("GET", "/_admin/faults").json["rates"] == {
        "tempfail_mail": 0.0, "reject_rcpt": 0.0, "drop_before_data": 0.2, "drop_during_data": 0.2,
        "drop_after_data": 0.2}
    # Each job through the worker loop and the reconciler, as far as they take it (bounded).
    for job in jobs:
        for _ in range(8):
            status = Job.objects.get(pk=job.pk).status
            if status == "pending":
                run_job(job.job_id)
            elif status == "needs_reconciliation":
                reconcile_job(job_id=job.job_id)
            else:
                break
    outcomes = {}
    for job in Job.objects.filter(action="smtp.send_mail"):
        received = len(smtp_sandbox.messages(message_id=message_id_for(job.idempotency_key)))
        outcomes[job.job_id] = (job.status, received)
        assert (job.status, received) in {("succeeded", 1), ("failed", 0)}, outcomes
    kinds = {kind for job in jobs for kind in job.events.values_list("kind", flat=True)}
    # With this seed every fault shows: a send failed before DATA (and was retried), one dropped after
    # DATA was confirmed, one dropped before it was archived was found missing and resent.
    assert {"failed", "reconciled_confirmed", "reconciled_not_found"} <= kinds
    assert_ledger_clean()


@pytest.mark.django_db
def test_a_later_batch_leaves_what_a_person_set_at_the_sandbox(provider):
    """The live demo configures the sandbox on its first batch only: a fault a person injects and
    a profile a person fixes are still there when the next batch is enqueued."""
    from sandbox.simulation import Workload, run

    run(Workload(jobs=3, fault_rate=0.3, tenants=1, mismatch_rate=0.0, bad_address_every=0, seed=1, prefix="b1"))
    assert provider.request("GET", "/_admin/faults").json["rates"]["error_5xx"] == 0.1
    provider.request("PUT", "/_admin/faults", {"rates": {"error_5xx": 1.0}})  # the person's incident drill
    provider.request("PUT", "/_admin/profiles/acme-switched", {"account": "acme-brand", "session": "active"})
    run(Workload(jobs=3, fault_rate=0.3, tenants=1, mismatch_rate=0.0, bad_address_every=0, seed=1, prefix="b2",
                 configure=False))
    assert provider.request("GET", "/_admin/faults").json["rates"]["error_5xx"] == 1.0
    assert provider.request("GET", "/profiles/acme-switched").json["account"] == "acme-brand"
    assert Job.objects.filter(job_id__startswith="b2-").count() == 3
