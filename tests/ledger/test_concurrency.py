"""Real concurrency against real PostgreSQL: threads, each on its own connection, racing the
transition layer. The job row lock and compare-and-set on (owner, fencing token) must make
every race come out as one winner and clearly recorded refusals, never two accepted writes.

Threads are released together by a `threading.Barrier`; nothing waits on `time.sleep`. Every
join is bounded, so a deadlock fails the test instead of hanging it.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest
from django.db import connection

from ledger import services
from ledger.invariants import find_violations
from ledger.models import Attempt, Job, LedgerEvent
from tests.conftest import expire_lease, latest_attempt, make_job

pytestmark = pytest.mark.django_db(transaction=True)

JOIN_TIMEOUT = 60  # seconds; generous for a 2-core machine, finite so a deadlock fails


def run_threads(*targets, timeout: float = JOIN_TIMEOUT) -> list:
    """Run each callable in its own thread (own DB connection), released together.

    Returns, in order, ("ok", value) or ("error", exception) for each callable. Fails the test
    if a thread is still running after `timeout` (a deadlock or a lost wake-up).
    """
    barrier = threading.Barrier(len(targets))
    outcomes: list = [None] * len(targets)

    def runner(index, target):
        try:
            barrier.wait(timeout=timeout)
            outcomes[index] = ("ok", target())
        except BaseException as exc:  # noqa: BLE001 - reported to the main thread
            outcomes[index] = ("error", exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=runner, args=(i, t), daemon=True) for i, t in enumerate(targets)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout  # one bound for all of them, not one each
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    stuck = [t.name for t in threads if t.is_alive()]
    assert not stuck, f"threads still running after {timeout}s (deadlock?): {stuck}"
    return outcomes


def attempt_rows(job_id: str) -> list[dict]:
    return list(Attempt.objects.filter(job__job_id=job_id).order_by("number").values())


def kinds(job_id: str) -> Counter:
    return Counter(LedgerEvent.objects.filter(job__job_id=job_id).values_list("kind", flat=True))


def assert_ledger_clean():
    assert not [f for f in find_violations() if f.count]


# --- duplicate delivery --------------------------------------------------------------------


def test_eight_workers_racing_to_claim_one_job_get_one_lease_and_seven_recorded_duplicates():
    make_job("race-claim")
    workers = [f"w{i}" for i in range(8)]

    outcomes = run_threads(
        *[(lambda w=w: services.claim_job(job_id="race-claim", worker=w)) for w in workers]
    )

    leases = [value for status, value in outcomes if status == "ok"]
    errors = [value for status, value in outcomes if status == "error"]
    assert len(leases) == 1, outcomes
    assert len(errors) == 7
    assert all(isinstance(e, services.ClaimRefused) for e in errors), errors
    assert {e.reason for e in errors} == {"duplicate_delivery"}
    (lease,) = leases
    assert (lease.token, lease.attempt_number) == (1, 1)
    assert lease.owner in workers

    job = Job.objects.get(job_id="race-claim")
    assert job.lease_seq == 1
    assert job.status == "running"
    counted = kinds("race-claim")
    assert counted["claimed"] == 1
    assert counted["duplicate_delivery"] == 7
    # every refusal names the winner, and is recorded against the winner's attempt
    refused_by = set(
        LedgerEvent.objects.filter(job=job, kind="duplicate_delivery").values_list("actor", flat=True)
    )
    assert refused_by == set(workers) - {lease.owner}
    (attempt,) = Attempt.objects.filter(job=job)
    assert (attempt.execution_state, attempt.lease_owner, attempt.lease_token) == ("running", lease.owner, 1)
    assert_ledger_clean()


# --- stale writers -------------------------------------------------------------------------


def test_a_stale_writer_after_a_reclaim_is_rejected_on_every_write_and_changes_nothing():
    make_job("stale")
    lease_a = services.claim_job(job_id="stale", worker="A")
    expire_lease("stale")  # A stalls past its TTL
    lease_b = services.claim_job(job_id="stale", worker="B")
    assert (lease_b.attempt_number, lease_b.token) == (2, 2)
    assert lease_b.token > lease_a.token
    services.begin_side_effect(lease=lease_b)  # B is mid-flight: running / submitted

    before = attempt_rows("stale")
    rejected_before = kinds("stale")["late_write_rejected"]
    stale_writes = [
        ("begin_side_effect", lambda: services.begin_side_effect(lease=lease_a)),
        (
            "record_success",
            lambda: services.record_success(lease=lease_a, result_ref="from-A", evidence={"by": "A"}),
        ),
        ("record_unknown", lambda: services.record_unknown(lease=lease_a, reason="A lost the connection")),
        ("renew_lease", lambda: services.renew_lease(lease=lease_a)),
        ("record_failure", lambda: services.record_failure(lease=lease_a, error="A says no", retryable=True)),
        ("verify_identity", lambda: services.verify_identity(lease=lease_a, observed={"account": "x"})),
    ]
    for operation, write in stale_writes:
        with pytest.raises(services.StaleLease):
            write()
        assert attempt_rows("stale") == before, f"{operation} by a stale lease changed an attempt"
        event = LedgerEvent.objects.filter(job__job_id="stale").latest("id")
        assert event.kind == "late_write_rejected"
        assert (event.actor, event.evidence["operation"]) == ("A", operation)
        assert (event.evidence["stale_token"], event.evidence["current_token"]) == (
            lease_a.token,
            lease_b.token,
        )
        assert event.attempt.number == 1
    assert kinds("stale")["late_write_rejected"] == rejected_before + len(stale_writes)

    first, second = (Attempt.objects.get(job__job_id="stale", number=n) for n in (1, 2))
    assert (first.delivery_state, first.execution_state, first.side_effect_state) == (
        "dead_lettered",
        "failed",
        "not_attempted",
    )
    assert first.result_ref == ""
    assert "A says no" not in first.error and "A lost" not in first.error
    assert (second.execution_state, second.side_effect_state, second.lease_owner, second.lease_token) == (
        "running",
        "submitted",
        "B",
        2,
    )
    assert (second.result_ref, second.error) == ("", "")
    job = Job.objects.get(job_id="stale")
    assert (job.status, job.lease_seq) == ("running", 2)
    assert not Attempt.objects.filter(job=job, number=3).exists()

    # B, the current holder, is unaffected and finishes normally
    services.record_success(lease=lease_b, result_ref="from-B")
    second.refresh_from_db()
    assert (second.execution_state, second.side_effect_state, second.result_ref) == (
        "succeeded",
        "confirmed",
        "from-B",
    )
    assert_ledger_clean()


def test_a_stale_writer_is_rejected_after_the_sweeper_reclaimed_its_attempt():
    make_job("swept")
    lease_a = services.claim_job(job_id="swept", worker="A")
    expire_lease("swept")
    assert services.sweep_expired_leases().reclaimed == ["swept"]
    before = attempt_rows("swept")

    for write in (
        lambda: services.begin_side_effect(lease=lease_a),
        lambda: services.record_success(lease=lease_a, result_ref="late"),
        lambda: services.renew_lease(lease=lease_a),
    ):
        with pytest.raises(services.StaleLease):
            write()
    assert attempt_rows("swept") == before
    assert kinds("swept")["late_write_rejected"] == 3
    # the reopened attempt is still there for the next worker, with the next token
    lease_b = services.claim_job(job_id="swept", worker="B")
    assert (lease_b.attempt_number, lease_b.token) == (2, 2)
    assert_ledger_clean()


ROUNDS = 8


def _setup_submitted_and_expired(job_id: str) -> services.Lease:
    make_job(job_id)
    lease = services.claim_job(job_id=job_id, worker="A")
    services.begin_side_effect(lease=lease)
    expire_lease(job_id)  # A stalled mid-call; its lease ran out
    return lease


@pytest.mark.parametrize("other", ["sweep", "claim"])
def test_a_late_success_racing_the_sweeper_or_a_reclaim_is_never_accepted_twice(other):
    """A (lease expired after submitting) reports success while B sweeps or claims.

    Either order is legitimate, but exactly one of them may win: A's success is accepted and
    B finds a finished job, or B marks the attempt unknown and A's write is rejected.
    """
    orders = Counter()
    for round_no in range(ROUNDS):
        job_id = f"late-{other}-{round_no}"
        lease_a = _setup_submitted_and_expired(job_id)

        def a_writes(lease=lease_a):
            return services.record_success(lease=lease, result_ref="from-A")

        def b_acts(job_id=job_id):
            if other == "sweep":
                return services.sweep_expired_leases()
            return services.claim_job(job_id=job_id, worker="B")

        (a_status, a_value), (b_status, b_value) = run_threads(a_writes, b_acts)
        first = Attempt.objects.get(job__job_id=job_id, number=1)
        job = Job.objects.get(job_id=job_id)
        counted = kinds(job_id)
        assert Attempt.objects.filter(job=job).count() == 1, "no retry may open while the effect is in doubt"
        assert job.lease_seq == 1

        if a_status == "ok":
            orders["A first"] += 1
            assert (first.execution_state, first.side_effect_state, first.result_ref) == (
                "succeeded",
                "confirmed",
                "from-A",
            )
            assert job.status == "succeeded"
            assert counted["late_write_rejected"] == 0 and counted["lease_expired_unknown"] == 0
            if other == "sweep":
                assert b_status == "ok" and job_id not in b_value.unknown + b_value.reclaimed, b_value
            else:
                assert b_status == "error" and isinstance(b_value, services.ClaimRefused), b_value
                assert b_value.reason == "duplicate_delivery"
        else:
            orders["B first"] += 1
            assert isinstance(a_value, services.StaleLease), a_value
            assert (first.execution_state, first.side_effect_state, first.delivery_state) == (
                "unknown",
                "ambiguous",
                "dead_lettered",
            )
            assert first.result_ref == ""
            assert job.status == "needs_reconciliation"
            assert counted["late_write_rejected"] == 1 and counted["lease_expired_unknown"] == 1
            assert counted["succeeded"] == 0
            if other == "sweep":
                assert b_status == "ok" and job_id in b_value.unknown, b_value
            else:
                assert b_status == "error" and isinstance(b_value, services.ClaimRefused), b_value
                assert b_value.reason == "previous_attempt_unknown"
    assert sum(orders.values()) == ROUNDS
    assert_ledger_clean()


def test_a_stale_renew_racing_a_reclaim_never_leaves_two_live_leases():
    """A's lease has expired before anything was submitted; A renews while B claims.

    An expired lease cannot be renewed whichever thread runs first, and B always gets attempt 2
    with the next token: at no point do A and B both hold a usable lease.
    """
    for round_no in range(ROUNDS):
        job_id = f"renew-{round_no}"
        make_job(job_id)
        lease_a = services.claim_job(job_id=job_id, worker="A")
        expire_lease(job_id)

        (a_status, a_value), (b_status, b_value) = run_threads(
            lambda lease=lease_a: services.renew_lease(lease=lease),
            lambda job_id=job_id: services.claim_job(job_id=job_id, worker="B"),
        )

        assert a_status == "error" and isinstance(a_value, services.StaleLease), a_value
        assert b_status == "ok", b_value
        assert (b_value.attempt_number, b_value.token) == (2, 2)
        live = Attempt.objects.filter(job__job_id=job_id, execution_state="running")
        assert list(live.values_list("lease_owner", "lease_token")) == [("B", 2)]
        # and A can do nothing with its old lease afterwards either
        with pytest.raises(services.StaleLease):
            services.begin_side_effect(lease=lease_a)
    assert_ledger_clean()


# --- throughput without deadlock -----------------------------------------------------------


def test_eight_full_worker_cycles_with_a_concurrent_sweeper_loop_finish_without_deadlock():
    job_ids = [f"cycle-{i}" for i in range(8)]
    for job_id in job_ids:
        make_job(job_id)
    # Work for the sweeper while the workers run: stalled leases, before and after a submit.
    stalled_quiet = [f"stalled-quiet-{i}" for i in range(3)]
    stalled_submitted = [f"stalled-submitted-{i}" for i in range(3)]
    for job_id in stalled_quiet + stalled_submitted:
        make_job(job_id)
        lease = services.claim_job(job_id=job_id, worker="ghost")
        if job_id in stalled_submitted:
            services.begin_side_effect(lease=lease)
        expire_lease(job_id)

    stop = threading.Event()
    workers_done = threading.Barrier(len(job_ids) + 1)
    sweeps: list[services.SweepResult] = []

    def cycle(job_id):
        def run():
            try:
                lease = services.claim_job(job_id=job_id, worker=f"worker-{job_id}")
                lease = services.renew_lease(lease=lease)
                services.begin_side_effect(lease=lease)
                return services.record_success(lease=lease, result_ref=f"ref-{job_id}")
            finally:
                workers_done.wait(timeout=JOIN_TIMEOUT)

        return run

    def sweeper():
        passes = 0
        while True:  # at least one pass overlaps the workers, and one more runs after them
            sweeps.append(services.sweep_expired_leases(limit=50))
            passes += 1
            if stop.is_set():
                return passes

    def coordinator():
        try:
            workers_done.wait(timeout=JOIN_TIMEOUT)
        finally:
            stop.set()  # even if a worker broke the barrier: the sweeper must end

    outcomes = run_threads(*[cycle(j) for j in job_ids], sweeper, coordinator)

    errors = [(i, value) for i, (status, value) in enumerate(outcomes) if status == "error"]
    assert not errors, errors
    assert outcomes[len(job_ids)][1] >= 1  # sweeper passes, the first started with the workers
    for job_id in job_ids:
        attempt = latest_attempt(job_id)
        assert (attempt.number, attempt.execution_state, attempt.side_effect_state, attempt.result_ref) == (
            1,
            "succeeded",
            "confirmed",
            f"ref-{job_id}",
        )
        assert Job.objects.get(job_id=job_id).status == "succeeded"
    reclaimed = [j for s in sweeps for j in s.reclaimed]
    unknown = [j for s in sweeps for j in s.unknown]
    assert sorted(reclaimed) == sorted(stalled_quiet)  # each exactly once
    assert sorted(unknown) == sorted(stalled_submitted)
    for job_id in stalled_quiet:
        assert [
            (a.number, a.execution_state)
            for a in Attempt.objects.filter(job__job_id=job_id).order_by("number")
        ] == [(1, "failed"), (2, "not_started")]
    for job_id in stalled_submitted:
        assert [
            (a.number, a.execution_state, a.side_effect_state)
            for a in Attempt.objects.filter(job__job_id=job_id)
        ] == [(1, "unknown", "ambiguous")]
    assert_ledger_clean()


# --- enqueue races -------------------------------------------------------------------------


def test_two_concurrent_enqueues_of_the_same_job_create_one_job_and_both_get_it():
    outcomes = run_threads(
        *[
            (
                lambda: services.enqueue_job(
                    job_id="twin", tenant="acme", action="reckon.echo", payload={"n": 1}
                )
            )
        ]
        * 2
    )

    assert [status for status, _ in outcomes] == ["ok", "ok"], outcomes
    first, second = (value for _, value in outcomes)
    assert first.pk == second.pk
    assert Job.objects.filter(job_id="twin").count() == 1
    assert Attempt.objects.filter(job__job_id="twin").count() == 1
    assert kinds("twin") == Counter({"enqueued": 1, "enqueue_repeated": 1})
    assert_ledger_clean()


def test_two_concurrent_enqueues_with_different_payloads_one_wins_and_the_other_is_refused():
    payloads = [{"n": 1}, {"n": 2}]
    outcomes = run_threads(
        *[
            (lambda p=p: services.enqueue_job(job_id="clash", tenant="acme", action="reckon.echo", payload=p))
            for p in payloads
        ]
    )

    statuses = sorted(status for status, _ in outcomes)
    assert statuses == ["error", "ok"], outcomes
    winner = next(i for i, (status, _) in enumerate(outcomes) if status == "ok")
    loser_error = outcomes[1 - winner][1]
    assert isinstance(loser_error, services.JobConflict), loser_error
    assert "payload" in str(loser_error)
    job = Job.objects.get(job_id="clash")
    assert job.payload == payloads[winner]
    assert outcomes[winner][1].pk == job.pk
    assert Attempt.objects.filter(job=job).count() == 1
    assert kinds("clash") == Counter({"enqueued": 1})
    assert_ledger_clean()
