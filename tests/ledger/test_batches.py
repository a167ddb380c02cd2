"""Batched steps: claim up to N jobs in one statement, begin their side effects in one transaction,
record their results in one transaction; each job keeps its own attempt, fencing token, events and
hash chain, and a refusal of one job refuses that job alone, saying why."""

from __future__ import annotations

import json
from datetime import timedelta

import psycopg
import pytest
from django.db import connection, transaction

from api.waiting import listener_conninfo
from bench.generate import pending_jobs
from ledger import fastpath, services
from ledger.actions import Action, _registry, register
from ledger.invariants import find_violations, first_broken_event
from ledger.models import Attempt, Job, LedgerEvent
from ledger.services import Outcome
from ledger.states import Execution, JobStatus, SideEffect
from tests.conftest import event_kinds, expire_lease, latest_attempt, make_job
from tests.ledger.test_fast_path import _columns

# Transactional: each batch step is then its own transaction, as for a worker, and the claim takes
# its one statement (inside a caller's transaction the claim goes job by job).
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def statements(monkeypatch):
    """Each batch statement run (ledger.fastpath.run_batch_step), with how many rows it returned."""
    seen, run = [], fastpath.run_batch_step

    def watched(step, params):
        rows = run(step, params)
        seen.append((step, len(rows)))
        return rows

    monkeypatch.setattr(fastpath, "run_batch_step", watched)
    return seen


def _violations() -> list[str]:
    return [finding.check for finding in find_violations() if finding.count]


def test_a_batch_takes_each_step_for_n_jobs_in_one_statement_each_job_with_its_own_lease(statements):
    for n in range(5):
        make_job(f"j{n}")

    leases = services.claim_next_jobs(worker="w1", limit=3)
    assert [lease.job_id for lease in leases] == ["j0", "j1", "j2"]  # the oldest first
    assert [(lease.owner, lease.token, lease.attempt_number) for lease in leases] == [("w1", 1, 1)] * 3
    assert len({lease.attempt_id for lease in leases}) == 3
    begun = services.begin_side_effects(leases=leases, sent_to="https://mail.example/acct")
    assert [(a.execution_state, a.side_effect_state, a.sent_to) for a in begun] == [
        (Execution.RUNNING, SideEffect.SUBMITTED, "https://mail.example/acct")] * 3
    done = services.record_results(outcomes=[Outcome.succeeded(lease, f"msg-{lease.job_id}", {"n": n})
                                             for n, lease in enumerate(leases)])

    assert [(a.execution_state, a.side_effect_state, a.result_ref) for a in done] == [
        (Execution.SUCCEEDED, SideEffect.CONFIRMED, f"msg-j{n}") for n in range(3)]
    assert statements == [("claim_next", 3), ("begin", 3), ("succeed", 3)]
    for n in range(3):
        job = Job.objects.get(job_id=f"j{n}")
        assert job.status == JobStatus.SUCCEEDED and job.lease_seq == 1
        assert event_kinds(f"j{n}") == ["enqueued", "claimed", "side_effect_started", "succeeded"]
        assert job.events.get(kind="succeeded").evidence == {"n": n}
        assert first_broken_event(job.pk) is None
    assert [Job.objects.get(job_id=f"j{n}").status for n in (3, 4)] == [JobStatus.PENDING] * 2
    assert _violations() == []


def test_a_refused_job_in_a_batch_is_refused_alone_saying_why_and_the_others_proceed():
    for name in ("ok", "taken", "expired", "done"):
        make_job(name)
    leases = {lease.job_id: lease for lease in services.claim_next_jobs(worker="w1", limit=4)}
    # "taken": its lease ran out and another worker holds the job now (a stale fencing token);
    # "expired": its lease ran out, nobody took it; "done": another worker's write finished it.
    expire_lease("taken")
    services.sweep_expired_leases()  # not begun: the attempt goes back to the queue
    taken_over = services.claim_job(job_id="taken", worker="w2")
    expire_lease("expired")
    order = [leases[name] for name in ("ok", "taken", "expired", "done")]

    begun = services.begin_side_effects(leases=order)

    ok, stale, expired, _ = begun
    assert ok.side_effect_state == SideEffect.SUBMITTED
    assert isinstance(stale, services.StaleLease) and "fencing token 1 rejected" in str(stale)
    assert isinstance(expired, services.StaleLease) and "its lease expired" in str(expired)
    assert begun[3].side_effect_state == SideEffect.SUBMITTED
    assert latest_attempt("taken").lease_token == taken_over.token == 2  # the new holder's lease, untouched
    assert latest_attempt("taken").side_effect_state == SideEffect.NOT_ATTEMPTED
    assert event_kinds("expired")[-1] == "late_write_rejected"

    # "done" is finished by a success written under its lease before the batch's results arrive.
    services.record_success(lease=leases["done"], result_ref="first")
    done = services.record_results(outcomes=[
        Outcome.succeeded(leases["ok"], "r-ok"), Outcome.succeeded(leases["taken"], "r-stale"),
        Outcome.succeeded(leases["done"], "r-again")])

    assert done[0].execution_state == Execution.SUCCEEDED
    assert isinstance(done[1], services.StaleLease) and isinstance(done[2], services.StaleLease)
    assert "attempt 1 is succeeded" in str(done[2])
    assert latest_attempt("done").result_ref == "first"  # the late write changed nothing
    assert [Job.objects.get(job_id=name).status for name in ("ok", "taken", "expired", "done")] == [
        JobStatus.SUCCEEDED, JobStatus.RUNNING, JobStatus.RUNNING, JobStatus.SUCCEEDED]
    assert event_kinds("taken")[-1] == "late_write_rejected"
    assert _violations() == []


def test_one_transaction_records_successes_failures_and_unknowns_each_by_its_rules():
    for name in ("sent", "refused", "retry", "lost"):
        make_job(name)
    leases = services.claim_next_jobs(worker="w1", limit=4)
    services.begin_side_effects(leases=leases)
    sent, refused, retry, lost = leases

    done = services.record_results(outcomes=[
        Outcome.succeeded(sent, "r1"), Outcome.failed(refused, "422: bad address"),
        Outcome.failed(retry, "503: try later", retryable=True), Outcome.unknown(lost, "timed out")])

    assert [a.execution_state for a in done] == [Execution.SUCCEEDED, Execution.FAILED, Execution.FAILED,
                                                 Execution.UNKNOWN]
    assert [Job.objects.get(job_id=n).status for n in ("sent", "refused", "retry", "lost")] == [
        JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.PENDING, JobStatus.NEEDS_RECONCILIATION]
    assert Attempt.objects.filter(job__job_id="retry").count() == 2  # the next attempt, same key
    assert _violations() == []


def test_a_job_outside_the_callers_scope_is_refused_alone_and_untouched():
    make_job("mine", tenant="acme")
    make_job("theirs", tenant="globex")
    leases = services.claim_next_jobs(worker="w1", limit=2)  # no scope: both
    acme = fastpath.Scope(tenants=["acme"])
    before = list(LedgerEvent.objects.filter(job__job_id="theirs").values_list("id", flat=True))

    begun = services.begin_side_effects(leases=leases, scope=acme)

    assert begun[0].side_effect_state == SideEffect.SUBMITTED
    assert isinstance(begun[1], services.NotInScope)
    assert list(LedgerEvent.objects.filter(job__job_id="theirs").values_list("id", flat=True)) == before
    assert services.claim_next_jobs(worker="w2", limit=5, tenants=["globex"]) == []  # leased to w1


@pytest.fixture
def other_action():
    register(Action(name="test.other", lease_ttl=timedelta(seconds=30)))
    yield "test.other"
    _registry.pop("test.other", None)


def _job_rows_fetched() -> int:
    """Rows of ledger_job fetched through its indexes by this connection, as far as not yet reported
    (pg_stat_xact_user_tables: this transaction's, and perhaps the last ones')."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT idx_tup_fetch FROM pg_stat_xact_user_tables WHERE relname = 'ledger_job'")
        return cursor.fetchone()[0]


# (scope, the older backlog out of scope as (tenant, action) pairs, the action of the jobs in scope)
SCOPES = {
    "tenants": ({"tenants": ["acme"]}, [("globex", "reckon.echo"), ("globex", "test.other")], "reckon.echo"),
    "actions": ({"actions": ["test.other"]}, [("acme", "reckon.echo"), ("globex", "reckon.echo")], "test.other"),
    "both": ({"tenants": ["acme"], "actions": ["test.other", "reckon.echo"]},
             [("globex", "test.other"), ("acme", "test.ext")], "test.other"),
}


@pytest.mark.parametrize("scoped", SCOPES)
def test_a_scoped_claim_reads_its_own_oldest_jobs_not_the_older_backlog_of_others(scoped, other_action):
    scope, backlog, action = SCOPES[scoped]
    for n, (tenant, backlog_action) in enumerate(backlog):
        pending_jobs(count=300, prefix=f"theirs-{n}", tenant=tenant, action=backlog_action)
    mine = [make_job(f"mine-{n}", tenant="acme", action=action).job_id for n in range(4)]

    with transaction.atomic():  # the statistics are this transaction's (the claim's own, outside one)
        before = _job_rows_fetched()
        claimed, declined = fastpath.claim_next(worker="w", limit=3, scope=fastpath.Scope(**scope))
        fetched = _job_rows_fetched() - before

    assert [job.job_id for job, _ in claimed] == mine[:3] and declined == []
    assert fetched <= 3 * 4, f"read {fetched} rows of ledger_job for a claim of 3, behind 600 out of scope"


def test_a_scoped_claim_reads_past_the_jobs_another_claim_holds():
    for n in range(4):
        make_job(f"job-{n}", tenant="acme")
    make_job("elsewhere", tenant="globex")
    with psycopg.connect(listener_conninfo()) as other:  # another claim, still in its transaction
        other.execute("SELECT 1 FROM ledger_job WHERE job_id = 'job-0' FOR UPDATE")
        leases = services.claim_next_jobs(worker="w", limit=2, tenants=["acme"])
        assert [lease.job_id for lease in leases] == ["job-1", "job-2"]
        other.rollback()
    assert [lease.job_id for lease in services.claim_next_jobs(worker="w", limit=5, tenants=["acme"])] == \
        ["job-0", "job-3"]


def test_a_batch_of_one_writes_exactly_what_the_one_job_steps_write():
    make_job("single-j")
    lease = services.claim_next_job(worker="w1")
    services.begin_side_effect(lease=lease, sent_to="https://mail.example")
    services.record_success(lease=lease, result_ref="r", evidence={"seen": 1})

    make_job("batch-j")
    [lease] = services.claim_next_jobs(worker="w1", limit=1)
    services.begin_side_effects(leases=[lease], sent_to="https://mail.example")
    services.record_results(outcomes=[Outcome.succeeded(lease, "r", {"seen": 1})])

    def written(job_id: str) -> str:
        job = Job.objects.get(job_id=job_id)
        rows = [_columns(job), *map(_columns, job.attempts.order_by("number")),
                *map(_columns, job.events.order_by("id"))]
        return json.dumps(rows, default=str).replace(job_id, "J")

    assert written("batch-j") == written("single-j")


def test_claims_declined_by_the_function_go_job_by_job_and_a_refusal_is_passed_over(settings):
    from datetime import timedelta

    from ledger.actions import Action, _registry, register

    register(Action(name="test.irreversible", reversible=False, lease_ttl=timedelta(seconds=30)))
    try:
        settings.RECKON_GATE_BOUND_S = 60  # nobody completed a pass: the gate holds irreversible work
        make_job("held", action="test.irreversible")
        make_job("free")
        leases = services.claim_next_jobs(worker="w1", limit=2)
        assert [lease.job_id for lease in leases] == ["free"]
        held = Job.objects.get(job_id="held")
        assert held.status == JobStatus.PENDING and held.gated_at is not None
        assert event_kinds("held")[-1] == "claim_refused"
    finally:
        _registry.pop("test.irreversible", None)


def test_a_claim_inside_a_callers_transaction_goes_job_by_job():
    from django.db import transaction

    for n in range(3):
        make_job(f"j{n}")
    with transaction.atomic():
        leases = services.claim_next_jobs(worker="w1", limit=2)
    assert [(lease.job_id, lease.token) for lease in leases] == [("j0", 1), ("j1", 1)]
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM ledger_attempt WHERE execution_state = 'running'")
        assert cursor.fetchone()[0] == 2


def test_a_batch_of_several_writes_exactly_what_the_one_job_steps_write():
    """Each job of a batch gets the rows the one-job steps write for it (the set-based functions read
    the same rules), whatever else is in the batch."""
    def written(job_id: str) -> list:
        job = Job.objects.get(job_id=job_id)
        rows = [_columns(job), *map(_columns, job.attempts.order_by("number")),
                *map(_columns, job.events.order_by("id"))]
        return json.loads(json.dumps(rows, default=str).replace(job_id, "J"))

    names = ("plain", "bound", "noted")
    for name in names:
        make_job(f"one-{name}", identity={"account": "a"} if name == "bound" else {})
    for name in names:
        lease = services.claim_job(job_id=f"one-{name}", worker="w1")
        if name == "bound":
            services.verify_identity(lease=lease, observed={"account": "a"})
        services.begin_side_effect(lease=lease, sent_to="https://mail.example" if name != "plain" else None)
        services.record_success(lease=lease, result_ref=f"r-{name}", evidence={"n": name} if name == "noted" else None)

    for name in names:
        make_job(f"many-{name}", identity={"account": "a"} if name == "bound" else {})
    leases = services.claim_next_jobs(worker="w1", limit=3)
    services.verify_identity(lease=leases[1], observed={"account": "a"})
    for lease, name in zip(leases, names, strict=True):  # each its own sent_to: a batch call per lease
        services.begin_side_effects(leases=[lease], sent_to="https://mail.example" if name != "plain" else None)
    services.record_results(outcomes=[
        Outcome.succeeded(lease, f"r-{name}", {"n": name} if name == "noted" else None)
        for lease, name in zip(leases, names, strict=True)])

    for name in names:
        assert written(f"many-{name}") == written(f"one-{name}"), name


def test_a_batch_that_waits_for_a_jobs_lock_sees_what_its_holder_wrote_and_refuses_that_job_alone():
    """The batch functions lock every job first, then compare-and-set in a new statement: a lease
    another worker took over while the batch waited for the job's lock is refused, the rest begun."""
    import threading

    from django.db import transaction

    from config.processes import wait_until

    make_job("free")
    make_job("taken")
    leases = services.claim_next_jobs(worker="w1", limit=2)
    locked, release, answers = threading.Event(), threading.Event(), {}

    def holder():  # holds "taken" locked while another worker takes it over
        try:
            with transaction.atomic():
                Job.objects.select_for_update().get(job_id="taken")
                expire_lease("taken")
                services.sweep_expired_leases()
                answers["w2"] = services.claim_job(job_id="taken", worker="w2")
                locked.set()
                release.wait(60)
        finally:
            connection.close()

    def batch():
        try:
            answers["begun"] = services.begin_side_effects(leases=leases)
        finally:
            connection.close()

    threads = [threading.Thread(target=holder, daemon=True)]
    threads[0].start()
    assert locked.wait(60)
    threads.append(threading.Thread(target=batch, daemon=True))
    threads[1].start()

    def batch_waits_for_the_lock() -> bool:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                           "AND query LIKE '%%reckon_begin_many%%'")
            return cursor.fetchone()[0] == 1
    wait_until(batch_waits_for_the_lock, timeout=60, what="the batch to wait for the job's lock")
    release.set()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads)

    free, taken = answers["begun"]
    assert free.side_effect_state == SideEffect.SUBMITTED
    assert isinstance(taken, services.StaleLease) and "fencing token 1 rejected" in str(taken)
    attempt = latest_attempt("taken")
    assert (attempt.lease_owner, attempt.lease_token, attempt.side_effect_state) == (
        "w2", answers["w2"].token, SideEffect.NOT_ATTEMPTED)
    assert event_kinds("taken")[-1] == "late_write_rejected"
    assert _violations() == []
