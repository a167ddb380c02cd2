import pytest

from ledger import services
from ledger.models import Attempt, Job
from tests.conftest import event_kinds, expire_lease, make_job

pytestmark = pytest.mark.django_db


def test_it_reclaims_expired_leases_that_never_started_a_side_effect():
    make_job("a")
    services.claim_job(job_id="a", worker="crashed")
    expire_lease("a")
    result = services.sweep_expired_leases()
    assert result.reclaimed == ["a"] and result.unknown == []
    first, second = Attempt.objects.order_by("number")
    assert (first.delivery_state, first.execution_state) == ("dead_lettered", "failed")
    assert (second.execution_state, second.delivery_state) == ("not_started", "queued")
    assert Job.objects.get(job_id="a").status == "pending"
    assert event_kinds("a")[-2:] == ["lease_expired_reclaimed", "attempt_opened"]


def test_it_marks_expired_submitted_work_unknown_for_reconciliation():
    make_job("b")
    lease = services.claim_job(job_id="b", worker="crashed")
    services.begin_side_effect(lease=lease)
    expire_lease("b")
    result = services.sweep_expired_leases()
    assert result.unknown == ["b"]
    attempt = Attempt.objects.get()
    assert (attempt.delivery_state, attempt.execution_state, attempt.side_effect_state) == (
        "dead_lettered", "unknown", "ambiguous")
    assert Job.objects.get(job_id="b").status == "needs_reconciliation"


def test_it_leaves_live_leases_and_other_states_alone():
    make_job("live")
    services.claim_job(job_id="live", worker="w")
    make_job("queued")
    assert services.sweep_expired_leases().total == 0
    assert Job.objects.get(job_id="live").status == "running"


def test_it_fails_the_job_when_the_expired_attempt_was_the_last_one():
    make_job("c")
    for worker in ("w1", "w2"):
        services.claim_job(job_id="c", worker=worker)
        expire_lease("c")
    services.claim_job(job_id="c", worker="w3")
    expire_lease("c")
    result = services.sweep_expired_leases()
    assert result.exhausted == ["c"]
    assert Job.objects.get(job_id="c").status == "failed"


def test_the_sweep_command_prints_what_it_did(capsys):
    from django.core.management import call_command

    make_job("d")
    services.claim_job(job_id="d", worker="w")
    expire_lease("d")
    call_command("sweep_leases")
    assert "swept 1 expired lease(s)" in capsys.readouterr().out


def test_queued_work_whose_delivery_was_lost_is_dispatched_again(settings):
    from django.db import connection
    from django_q.models import OrmQ
    from django_q.signing import SignedPackage

    from ledger.tasks import run_job

    make_job("lost-task")  # enqueued, but its run_job task is gone (failed while the database was down)
    make_job("fresh")
    with connection.cursor() as cursor:
        cursor.execute("UPDATE ledger_job SET updated_at = clock_timestamp() - interval '10 minutes' "
                       "WHERE job_id = 'lost-task'")
    settings.RECKON_DISPATCH = True
    result = services.sweep_expired_leases()
    assert result.redispatched == ["lost-task"]
    queued = [SignedPackage.loads(row.payload) for row in OrmQ.objects.all()]
    assert [(task["func"], task["args"]) for task in queued] == [(run_job, ("lost-task",))]
    assert event_kinds("lost-task")[-1] == "redispatched"
    assert services.sweep_expired_leases().redispatched == []  # once per threshold, not every pass
