"""A hold ("I'm on it") ends when its job finishes, in the transition layer: the change, then a
job_released event by the system, in one transaction — whichever path finished the job."""

import pytest

from ledger import services
from ledger.models import Job
from ledger.states import ActorType
from tests.conftest import event_kinds, make_job

pytestmark = pytest.mark.django_db


def test_a_held_job_that_succeeds_is_released(settings):
    make_job("h-1")
    services.take_job(job_id="h-1", holder="olga")
    lease = services.claim_job(job_id="h-1", worker="w1")
    services.begin_side_effect(lease=lease)
    services.record_success(lease=lease, result_ref="ok-1")  # the fast path leaves a held job to Python
    job = Job.objects.get(job_id="h-1")
    assert (job.status, job.holder, job.held_since) == ("succeeded", "", None)
    assert event_kinds("h-1")[-2:] == ["succeeded", "job_released"]
    released = job.events.order_by("-id").first()
    assert (released.actor_type, released.actor, released.note, released.evidence) == (
        ActorType.SYSTEM, "ledger", "released olga's hold: the job is succeeded", {"released_from": "olga"})


def test_a_job_nobody_holds_finishes_without_a_release():
    make_job("h-2")
    lease = services.claim_job(job_id="h-2", worker="w1")
    services.begin_side_effect(lease=lease)
    services.record_success(lease=lease, result_ref="ok-2")
    assert Job.objects.get(job_id="h-2").status == "succeeded"
    assert "job_released" not in event_kinds("h-2")


def test_a_held_job_that_fails_for_good_is_released():
    make_job("h-3")
    services.take_job(job_id="h-3", holder="otto")
    lease = services.claim_job(job_id="h-3", worker="w1")
    services.record_failure(lease=lease, error="provider refused: invalid address")
    job = Job.objects.get(job_id="h-3")
    assert (job.status, job.holder) == ("failed", "")
    assert event_kinds("h-3")[-1] == "job_released"


def test_a_hold_on_a_job_that_goes_on_stays():
    make_job("h-4")
    services.take_job(job_id="h-4", holder="otto")
    lease = services.claim_job(job_id="h-4", worker="w1")
    services.begin_side_effect(lease=lease)
    services.record_unknown(lease=lease, reason="connection dropped")
    assert Job.objects.get(job_id="h-4").holder == "otto"
