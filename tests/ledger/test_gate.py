"""The dead-man gate: irreversible side effects wait while the safety loops are stale."""

import pytest
from django.db import connection
from django_q.models import OrmQ
from django_q.signing import SignedPackage

from ledger import services
from ledger.gate import gate_status, record_pass
from ledger.models import Job, LedgerEvent
from ledger.states import EventKind
from ledger.tasks import run_job
from tests.conftest import event_kinds, latest_attempt, make_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def gate_on(settings):
    settings.RECKON_GATE_BOUND_S = 30


def _age_pass(name: str, seconds: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute("UPDATE ledger_passrecord SET completed_at = clock_timestamp() - %s * interval '1 second' "
                       "WHERE name = %s", [seconds, name])


def test_the_gate_is_open_while_both_loops_complete_passes(gate_on):
    record_pass("sweeper")
    record_pass("reconciler")
    assert gate_status().open


def test_a_stale_reconciler_closes_the_gate_and_says_why(gate_on):
    record_pass("sweeper")
    record_pass("reconciler")
    _age_pass("reconciler", 600)
    gate = gate_status()
    assert not gate.open
    assert "reconciler has not completed a pass since" in gate.reason
    assert "sweeper" not in gate.reason


def test_a_loop_that_never_ran_keeps_the_gate_closed(gate_on):
    record_pass("sweeper")
    assert "reconciler has not completed a pass yet" in gate_status().reason


def test_irreversible_work_is_held_at_claim_and_reversible_work_goes_on(gate_on):
    make_job("rot", action="vault.rotate_credential", payload={"name": "db"})
    make_job("inv", action="billing.create_invoice", payload={"customer": "c", "amount_cents": 5, "currency": "EUR"})
    with pytest.raises(services.ClaimRefused, match="dead-man gate") as refused:
        services.claim_job(job_id="rot", worker="w")
    assert refused.value.reason == "dead_man_gate"
    assert latest_attempt("rot").execution_state == "not_started"
    assert Job.objects.get(job_id="rot").gated_at is not None
    assert event_kinds("rot")[-1] == "claim_refused"
    lease = services.claim_job(job_id="inv", worker="w")  # reversible: not gated
    services.begin_side_effect(lease=lease)


def test_a_lease_granted_before_the_gate_closed_is_handed_back_at_begin(gate_on, settings):
    make_job("rot", action="vault.rotate_credential", payload={"name": "db"})
    record_pass("sweeper")
    record_pass("reconciler")
    lease = services.claim_job(job_id="rot", worker="w")
    _age_pass("sweeper", 600)
    with pytest.raises(services.GateClosed, match="sweeper has not completed a pass"):
        services.begin_side_effect(lease=lease)
    attempt = latest_attempt("rot")
    assert (attempt.delivery_state, attempt.execution_state, attempt.side_effect_state) == (
        "queued", "not_started", "not_attempted")
    assert attempt.lease_token is None
    assert Job.objects.get(job_id="rot").status == "pending"
    assert event_kinds("rot")[-1] == "side_effect_held"
    with pytest.raises(services.StaleLease):  # the old lease can do nothing now
        services.begin_side_effect(lease=lease)


def test_the_gate_reopens_when_passes_resume_and_dispatches_what_it_held(gate_on, settings):
    make_job("rot", action="vault.rotate_credential", payload={"name": "db"})
    with pytest.raises(services.ClaimRefused):
        services.claim_job(job_id="rot", worker="w")
    settings.RECKON_DISPATCH = True
    services.complete_pass("sweeper")
    assert Job.objects.get(job_id="rot").gated_at is not None  # the reconciler is still stale
    services.complete_pass("reconciler")
    queued = [SignedPackage.loads(row.payload) for row in OrmQ.objects.all()]
    assert [(task["func"], task["args"]) for task in queued] == [(run_job, ("rot",))]
    assert Job.objects.get(job_id="rot").gated_at is None
    released = LedgerEvent.objects.get(job__job_id="rot", kind=EventKind.GATE_RELEASED)
    assert (released.actor_type, released.actor) == ("system", "reconciler")
    assert released.evidence["held_since"]
    lease = services.claim_job(job_id="rot", worker="w")
    services.begin_side_effect(lease=lease)
