"""The dead-man gate end to end: a real qcluster, a stalled reconciler, then passes resume."""

import pytest
from django_q.models import Schedule

from ledger.gate import gate_status
from ledger.invariants import find_violations
from ledger.models import Job
from ledger.services import sweep_expired_leases
from reconciliation.passes import reconcile_until_idle
from tests.conftest import latest_attempt, make_job, sandbox_env
from tests.processes import qcluster, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

BOUND_S = 2
INVOICE = {"customer": "cus_1", "amount_cents": 1200, "currency": "EUR"}


def _job(job_id: str) -> Job:
    return Job.objects.get(job_id=job_id)


def test_a_stalled_reconciler_holds_irreversible_work_until_passes_resume(provider, settings):
    settings.RECKON_GATE_BOUND_S = BOUND_S
    settings.RECKON_DISPATCH = True
    # Nothing in the cluster may run a reconciliation pass on its own: the reconciler is stalled.
    Schedule.objects.all().delete()
    make_job("rot", action="vault.rotate_credential", payload={"name": "db"})  # irreversible
    make_job("inv", action="billing.create_invoice", payload=INVOICE)  # reversible
    rot, inv = _job("rot"), _job("inv")

    def held_while_the_sweeper_runs():
        sweep_expired_leases()  # the sweeper keeps passing; only the reconciler is stale
        return _job("inv").status == "succeeded" and _job("rot").gated_at is not None

    env = {**sandbox_env(provider), "RECKON_GATE_BOUND_S": str(BOUND_S)}
    with qcluster(workers=2, env=env) as cluster:
        wait_for(
            held_while_the_sweeper_runs,
            timeout=60,
            interval=0.25,
            message=f"the invoice to succeed and the rotation to be held\n{cluster.output()[-1500:]}",
        )

        # Held: the claim was refused with its reason, nothing reached the vault.
        refusal = rot.events.filter(kind="claim_refused").order_by("id").first()
        assert refusal.evidence == {"reason": "dead_man_gate"}
        assert "the reconciler has not completed a pass" in refusal.note
        assert latest_attempt("rot").execution_state == "not_started"
        assert _job("rot").status == "pending"
        assert provider.effects(marker=rot.idempotency_key)["count"] == 0
        assert not gate_status().open
        # Reversible work went on meanwhile.
        assert provider.effects(marker=inv.idempotency_key)["count"] == 1

        # Passes resume: the gate reopens by itself and releases what it held.
        sweep_expired_leases()
        reconcile_until_idle()
        assert gate_status().open
        assert _job("rot").gated_at is None

        def resumed_loops_and_rotation_done():
            # The loops keep passing, as they do once running; a delivery that found the gate
            # stale again in between is held and released once more.
            sweep_expired_leases()
            reconcile_until_idle()
            return _job("rot").status == "succeeded"

        wait_for(
            resumed_loops_and_rotation_done,
            timeout=60,
            interval=0.25,
            message=f"the held rotation to run\n{cluster.output()[-1500:]}",
        )

    assert provider.effects(marker=rot.idempotency_key)["count"] == 1
    kinds = list(rot.events.order_by("id").values_list("kind", flat=True))
    assert kinds.index("claim_refused") < kinds.index("side_effect_started") < kinds.index("succeeded")
    assert kinds.count("side_effect_started") == 1
    assert not [f for f in find_violations() if f.count]
