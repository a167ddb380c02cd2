"""A step whose commit outcome is unknown (the primary died between COMMIT and its answer) may be
asked again: is that safe? Each worker step is a compare-and-set on the lease's owner and fencing
token, so here each one is run, committed, and then run again exactly as a worker that never
heard the answer would. None applies twice; each retry refuses and changes nothing. What a retry
cannot do is say "yours landed": the refusal looks like any stale write's, so Reckon's worker does
not retry a step it lost the answer of. It leaves the lease to run out: unbegun, the attempt is
reclaimed; begun, it is unknown and the provider is asked (ledger/availability.py).
"""

import pytest

from ledger import services
from ledger.models import Job
from ledger.states import Execution, SideEffect
from tests.conftest import event_kinds, expire_lease, latest_attempt, make_job

pytestmark = pytest.mark.django_db


def _claimed(job_id: str) -> services.Lease:
    make_job(job_id)
    return services.claim_job(job_id=job_id, worker="worker-a")


def test_a_claim_asked_again_is_refused_and_its_first_lease_runs_out_unbegun():
    lease = _claimed("retry-claim")
    with pytest.raises(services.ClaimRefused):
        services.claim_job(job_id="retry-claim", worker="worker-a")
    expire_lease("retry-claim")
    services.sweep_expired_leases()
    attempt = latest_attempt("retry-claim")
    assert attempt.number == 2 and attempt.side_effect_state == SideEffect.NOT_ATTEMPTED
    assert lease.attempt_id != attempt.id  # the orphaned lease's attempt was dead-lettered, nothing begun


def test_a_begin_asked_again_changes_nothing_and_does_not_say_go():
    lease = _claimed("retry-begin")
    services.begin_side_effect(lease=lease)
    with pytest.raises(services.LedgerError, match="already submitted"):
        services.begin_side_effect(lease=lease)
    assert event_kinds("retry-begin").count("side_effect_started") == 1
    assert latest_attempt("retry-begin").side_effect_state == SideEffect.SUBMITTED


def test_a_success_asked_again_is_refused_as_a_late_write_and_the_result_stands():
    lease = _claimed("retry-success")
    services.begin_side_effect(lease=lease)
    services.record_success(lease=lease, result_ref="first")
    with pytest.raises(services.StaleLease):
        services.record_success(lease=lease, result_ref="again")
    attempt = latest_attempt("retry-success")
    assert (attempt.execution_state, attempt.side_effect_state, attempt.result_ref) == (
        Execution.SUCCEEDED, SideEffect.CONFIRMED, "first")
    kinds = event_kinds("retry-success")
    assert kinds.count("succeeded") == 1 and kinds.count("late_write_rejected") == 1


def test_a_retryable_failure_asked_again_opens_no_second_attempt():
    lease = _claimed("retry-failure")
    services.record_failure(lease=lease, error="provider said 503", retryable=True)
    with pytest.raises(services.StaleLease):
        services.record_failure(lease=lease, error="provider said 503", retryable=True)
    assert Job.objects.get(job_id="retry-failure").attempts.count() == 2


def test_an_unknown_asked_again_stays_one_unknown():
    lease = _claimed("retry-unknown")
    services.begin_side_effect(lease=lease)
    services.record_unknown(lease=lease, reason="the database went away mid-call")
    with pytest.raises(services.StaleLease):
        services.record_unknown(lease=lease, reason="the database went away mid-call")
    assert event_kinds("retry-unknown").count("observation_lost") == 1
    assert latest_attempt("retry-unknown").execution_state == Execution.UNKNOWN
