"""claim_next_job: the oldest claimable job in a scope, claimed exactly as claim_job claims it,
and the NOTIFY that tells waiting workers when jobs become claimable."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import psycopg
import pytest
from django.db import connection, transaction

from api.waiting import listener_conninfo
from ledger import services
from ledger.actions import Action, _registry, register
from ledger.models import Job, LedgerEvent
from ledger.services.claimable import CHANNEL, decode
from reconciliation.recovery import hold_for_recovery
from tests.conftest import event_kinds, latest_attempt, make_job
from tests.ledger.test_concurrency import run_threads
from tests.reconciliation.helpers import assert_ledger_clean

# Transactional: claim_next_job is then its own transaction, as in a web request, and takes its
# one-round-trip path; the `claim_next` fixture also runs each test's claims inside a caller's
# transaction, where the general path decides.
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(params=["own transaction", "in a caller's transaction"])
def claim_next(request):
    def claim(**options):
        if request.param == "own transaction":
            return services.claim_next_job(**options)
        with transaction.atomic():
            return services.claim_next_job(**options)
    return claim


@pytest.fixture
def external():
    """Two external actions (run by workers over HTTP), one of them irreversible."""
    names = ("test.ext", "test.ext_irreversible")
    register(Action(name=names[0], lease_ttl=timedelta(seconds=30)))
    register(Action(name=names[1], reversible=False, lease_ttl=timedelta(seconds=30)))
    yield names
    for name in names:
        _registry.pop(name, None)


def test_it_claims_the_oldest_pending_job_in_scope_with_the_events_of_a_claim(external, claim_next):
    for job_id, tenant in (("old", "acme"), ("mid", "beta"), ("new", "acme")):
        make_job(job_id, action="test.ext", tenant=tenant)
    make_job("other-action", action="reckon.echo")

    lease = claim_next(worker="w1", actions=["test.ext"], tenants=["acme"])
    assert (lease.job_id, lease.owner, lease.token, lease.attempt_number) == ("old", "w1", 1, 1)
    assert event_kinds("old") == ["enqueued", "claimed"]
    claimed = Job.objects.get(job_id="old").events.get(kind="claimed")
    assert claimed.actor == "w1" and claimed.evidence["fencing_token"] == 1

    assert claim_next(worker="w2", actions=["test.ext"], tenants=["acme"]).job_id == "new"
    assert claim_next(worker="w3", actions=["test.ext"], tenants=["acme"]) is None
    assert claim_next(worker="w4", actions=["test.ext"]).job_id == "mid"
    assert claim_next(worker="w5", actions=[]) is None  # an empty scope holds nothing
    assert Job.objects.get(job_id="other-action").status == "pending"
    assert_ledger_clean()


def test_an_unknown_attempt_a_recovery_hold_and_a_live_lease_are_never_handed_out(external, claim_next):
    make_job("unknown", action="test.ext")
    lease = services.claim_job(job_id="unknown", worker="a")
    services.begin_side_effect(lease=lease)
    services.record_unknown(lease=lease, reason="lost sight of it")
    make_job("running", action="test.ext")
    services.claim_job(job_id="running", worker="a")
    make_job("held", action="test.ext")
    hold_for_recovery(window_minutes=30)  # every unfinished job: unknown, running and held

    events_before = LedgerEvent.objects.count()
    assert claim_next(worker="b", actions=["test.ext"]) is None
    assert LedgerEvent.objects.count() == events_before  # nothing was even tried
    assert latest_attempt("unknown").execution_state == "unknown"
    assert_ledger_clean()


def test_a_retry_is_claimable_again_with_the_next_fencing_token(external, claim_next):
    make_job("retry", action="test.ext")
    lease = claim_next(worker="a", actions=["test.ext"])
    services.record_failure(lease=lease, error="provider said 429", retryable=True)
    again = claim_next(worker="b", actions=["test.ext"])
    assert (again.job_id, again.attempt_number, again.token) == ("retry", 2, 2)
    assert_ledger_clean()


def test_the_dead_man_gate_holds_irreversible_work_and_the_next_job_is_claimed(external, claim_next, settings):
    settings.RECKON_GATE_BOUND_S = 30  # no loop has completed a pass: the gate is closed
    make_job("irreversible", action="test.ext_irreversible")
    make_job("reversible", action="test.ext")

    lease = claim_next(worker="w", actions=list(external))
    assert lease.job_id == "reversible"
    assert event_kinds("irreversible") == ["enqueued", "claim_refused"]  # as claim_job records it
    held = Job.objects.get(job_id="irreversible")
    assert held.gated_at is not None and held.status == "pending"
    assert held.events.get(kind="claim_refused").evidence == {"reason": "dead_man_gate"}
    assert claim_next(worker="w", actions=list(external)) is None  # held until released
    assert event_kinds("irreversible") == ["enqueued", "claim_refused"]
    assert_ledger_clean()


def test_eight_concurrent_claimers_never_take_one_job_twice(external):
    jobs = [make_job(f"race-{n}", action="test.ext", tenant=("acme", "beta")[n % 2]).job_id for n in range(40)]

    def claimer(tenants):
        def claim_all() -> list[str]:
            taken = []
            while (lease := services.claim_next_job(worker="racer", actions=["test.ext"], tenants=tenants)):
                taken.append(lease.job_id)
            return taken
        return claim_all

    outcomes = run_threads(*[claimer(["acme"] if n < 4 else None) for n in range(8)])
    assert all(kind == "ok" for kind, _ in outcomes), outcomes
    taken = [job_id for _, claimed in outcomes for job_id in claimed]
    assert Counter(taken).most_common(1)[0][1] == 1 and sorted(taken) == sorted(jobs)
    for _, claimed in outcomes[:4]:
        assert all(Job.objects.get(job_id=job_id).tenant == "acme" for job_id in claimed)
    assert not LedgerEvent.objects.filter(kind__in=["duplicate_delivery", "claim_refused"]).exists()
    assert LedgerEvent.objects.filter(kind="claimed").count() == 40
    assert_ledger_clean()


def test_jobs_handed_to_workers_notify_on_commit_and_never_on_rollback(external):
    with psycopg.connect(listener_conninfo(), autocommit=True) as listening:
        listening.execute(f"LISTEN {CHANNEL}")
        make_job("seen", action="test.ext", tenant="acme")
        make_job("seen-too", action="test.ext", tenant="acme")
        with pytest.raises(RuntimeError), transaction.atomic():
            make_job("rolled-back", action="test.ext", tenant="beta")
            raise RuntimeError("the enqueue's transaction rolls back")
        lease = services.claim_job(job_id="seen", worker="w")
        services.record_failure(lease=lease, error="429", retryable=True)  # the retry is handed out again
        received = [decode(n.payload) for n in listening.notifies(timeout=2.0, stop_after=3)]
    assert received == [("acme", "test.ext")] * 3
    assert not Job.objects.filter(job_id="rolled-back").exists()


def test_external_jobs_never_reach_django_q2_even_when_retried_or_reclaimed(external, settings):
    from django_q.models import OrmQ

    settings.RECKON_DISPATCH = True
    make_job("ext-retried", action="test.ext")
    lease = services.claim_next_job(worker="w", actions=["test.ext"])
    services.record_failure(lease=lease, error="429", retryable=True)
    make_job("ext-expired", action="test.ext")
    lease = services.claim_job(job_id="ext-expired", worker="w")
    with connection.cursor() as cursor:  # its worker vanished: the lease runs out
        cursor.execute("UPDATE ledger_attempt SET lease_expires_at = clock_timestamp() - interval '1 second' "
                       "WHERE id = %s", [lease.attempt_id])
    assert services.sweep_expired_leases().reclaimed == ["ext-expired"]
    make_job("in-process", action="reckon.echo")
    assert [row.task["args"] for row in OrmQ.objects.all()] == [("in-process",)]
    assert latest_attempt("ext-expired").number == 2 and latest_attempt("ext-retried").number == 2
