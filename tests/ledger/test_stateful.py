"""A Hypothesis state machine drives random worker-loop sequences over a small pool of jobs.

Workers claim, renew, verify identity, begin side effects and record outcomes; the lease
sweeper runs; the clock jumps past a running lease. Every lease ever issued stays in play, so
late writes by stale holders are exercised as often as the current holder's writes. A small
model predicts the outcome of every call (accepted, or which documented refusal), and after
every step the database is checked against the model and against the invariants of docs/architecture.md,
above all:

    no retry may create a new side effect while a previous attempt of the same job is unknown.

All examples run inside one `django_db` test (one transaction); each example runs in a
savepoint rolled back at its end, and uses fresh job ids besides (the services read
clock_timestamp(), so leases still expire inside the transaction).
"""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import dataclass

import psycopg
import pytest
from django.db import connection, transaction
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
    run_state_machine_as_test,
)

from ledger import services
from ledger.invariants import CHECKS, find_violations
from ledger.models import Attempt, Job, LedgerEvent
from tests.conftest import expire_lease

MAX_ATTEMPTS = 3  # reckon.echo
WORKERS = ("w1", "w2", "w3")
BINDING = {"account": "a"}  # the last job of each example is bound to it
OBSERVED = ({"account": "a"}, {"account": "b"}, {}, {"account": "a", "profile": "p1"})
FINISHED = ("succeeded", "failed")
LIVE = ("not_started", "running", "unknown", "blocked")

# Tuned so the module runs in roughly 25-30 s on a 2-core machine: ~1,700 steps at ~12 ms each
# (a service call, its before/after snapshots, then ledger_check and the invariants below).
MAX_EXAMPLES = 50
STEPS = 40


@dataclass
class ModelJob:
    """What the ledger must say about one job: its latest attempt and who holds it."""

    job_id: str
    identity: dict
    attempt: int = 1
    execution: str = "not_started"
    side_effect: str = "not_attempted"
    status: str = "pending"
    lease_seq: int = 0
    holder: tuple[str, int] | None = None  # (owner, token) while running
    expired: bool = False  # the clock jumped past the running lease
    verified: bool = False  # the running attempt has an observed identity
    last_lease: services.Lease | None = None  # the most recent lease handed out for this job

    def holds(self, lease: services.Lease, *, require_unexpired: bool) -> bool:
        return (
            self.execution == "running"
            and lease.attempt_number == self.attempt
            and self.holder == (lease.owner, lease.token)
            and not (require_unexpired and self.expired)
        )

    def close(self, execution: str, side_effect: str, status: str | None) -> None:
        self.execution, self.side_effect, self.holder, self.expired = execution, side_effect, None, False
        if status:
            self.status = status

    def open_next(self) -> bool:
        """After a closed attempt: queue the next one, or fail the job. True if one was queued."""
        if self.attempt >= MAX_ATTEMPTS:
            self.status = "failed"
            return False
        self.attempt += 1
        self.execution, self.side_effect, self.status, self.verified = (
            "not_started",
            "not_attempted",
            "pending",
            False,
        )
        return True

    def expire(self) -> str:
        """The expired running lease is handled (by a claim or the sweeper)."""
        if self.side_effect == "submitted":
            self.close("unknown", "ambiguous", "needs_reconciliation")
            return "unknown"
        self.close("failed", "not_attempted", None)
        return "reclaimed" if self.open_next() else "exhausted"


# Which paths the examples reached: checked at the end so the test cannot pass vacuously.
PATHS: Counter = Counter()


def attempt_rows(job_id: str) -> list[dict]:
    return list(Attempt.objects.filter(job__job_id=job_id).order_by("number").values())


def event_count(job_id: str, kind: str) -> int:
    return LedgerEvent.objects.filter(job__job_id=job_id, kind=kind).count()


# A lease to act with: mostly the most recent lease of one of the jobs (often the live one),
# else any lease ever issued (often stale).
def lease_picks(bundle):
    job_index = st.integers(0, 2)
    return st.one_of(job_index, job_index, bundle)


def some_lease_issued(machine) -> bool:
    return any(m.last_lease for m in machine.jobs)


class LedgerMachine(RuleBasedStateMachine):
    leases = Bundle("leases")

    def __init__(self):
        super().__init__()
        self.jobs: list[ModelJob] = []
        self.stale_checks: list[tuple[str, list, list]] = []  # this step's (operation, before, after)
        # Each example starts from the same database: its rows go when it ends (the history is
        # append-only, so a savepoint is the only way), which keeps ledger_check's cost flat.
        self.savepoint = transaction.savepoint()

    def teardown(self):
        transaction.savepoint_rollback(self.savepoint)

    @initialize()
    def enqueue_jobs(self):
        prefix = uuid.uuid4().hex[:12]
        for i, identity in enumerate(({}, {}, BINDING)):
            job_id = f"sm-{prefix}-{i}"
            services.enqueue_job(
                job_id=job_id, tenant="acme", action="reckon.echo", payload={"n": i}, identity=identity
            )
            self.jobs.append(ModelJob(job_id=job_id, identity=identity))

    # --- helpers ---------------------------------------------------------------------------

    def lease_from(self, pick) -> services.Lease:
        if isinstance(pick, services.Lease):
            return pick
        issued = [m.last_lease for m in self.jobs if m.last_lease]
        return issued[pick % len(issued)]

    def model_for(self, lease: services.Lease) -> ModelJob:
        return next(m for m in self.jobs if m.job_id == lease.job_id)

    def call_with_lease(
        self,
        operation: str,
        lease: services.Lease,
        call,
        *,
        require_unexpired: bool,
        misuse: str | None = None,
        may_refuse: str | None = None,
    ):
        """Call a lease-holding service; check it was refused exactly when it had to be.

        A stale lease must get StaleLease, a `late_write_rejected` event and no change; the
        current holder is accepted unless `misuse` says why it must get a LedgerError (and no
        change); `may_refuse` names a call that may go either way. Returns the result when
        accepted, None when refused.
        """
        m = self.model_for(lease)
        current = m.holds(lease, require_unexpired=require_unexpired)
        before = attempt_rows(m.job_id)
        rejected_before = event_count(m.job_id, "late_write_rejected")
        try:
            result = call()
        except services.StaleLease:
            self.stale_checks.append((operation, before, attempt_rows(m.job_id)))
            PATHS[f"{operation}: stale"] += 1
            assert not current, f"{operation} by the current holder {lease} was refused as stale"
            assert event_count(m.job_id, "late_write_rejected") == rejected_before + 1
            return None
        except services.IdentityMismatch:
            raise  # only verify_identity expects it, and checks it itself
        except services.LedgerError as exc:
            assert current, f"{operation} by a stale lease {lease} got {exc!r} instead of StaleLease"
            assert misuse or may_refuse, f"{operation} by the current holder was refused: {exc!r}"
            assert attempt_rows(m.job_id) == before, f"refused {operation} changed an attempt"
            PATHS[f"{operation}: refused ({misuse or may_refuse})"] += 1
            return None
        assert current, f"{operation} by a stale lease {lease} was accepted"
        assert not misuse, f"{operation} should have been refused ({misuse}) but was accepted"
        PATHS[f"{operation}: accepted"] += 1
        return result

    # --- rules -----------------------------------------------------------------------------

    @rule(target=leases, index=st.integers(0, 2), worker=st.sampled_from(WORKERS))
    def claim(self, index, worker):
        m = self.jobs[index]
        before = attempt_rows(m.job_id)
        duplicates_before = Job.objects.get(job_id=m.job_id).duplicate_deliveries
        expected_refusal = None
        handled_expiry = False
        if m.status in FINISHED or (m.execution == "running" and not m.expired):
            expected_refusal = "duplicate_delivery"
        else:
            if m.execution == "running":  # an expired lease: this claim handles it first
                m.expire()
                handled_expiry = True
            if m.execution != "not_started":
                expected_refusal = {"unknown": "previous_attempt_unknown", "blocked": "attempt_blocked"}.get(
                    m.execution, "attempts_exhausted" if m.status == "failed" else "not_claimable"
                )
        try:
            lease = services.claim_job(job_id=m.job_id, worker=worker)
        except services.ClaimRefused as refused:
            assert refused.reason == expected_refusal, (refused.reason, expected_refusal, str(refused))
            PATHS[f"claim: refused {refused.reason}"] += 1
            if expected_refusal == "duplicate_delivery":  # counted each time, written once per attempt
                assert Job.objects.get(job_id=m.job_id).duplicate_deliveries == duplicates_before + 1
                assert event_count(m.job_id, "duplicate_delivery") >= 1
            if not handled_expiry:
                assert attempt_rows(m.job_id) == before, "a refused claim changed an attempt"
            return multiple()
        assert expected_refusal is None, f"claim should have been refused: {expected_refusal}"
        PATHS[f"claim: leased attempt {m.attempt}"] += 1
        m.lease_seq += 1
        m.execution, m.status, m.holder, m.expired, m.verified = (
            "running",
            "running",
            (worker, m.lease_seq),
            False,
            False,
        )
        assert (lease.job_id, lease.owner, lease.token, lease.attempt_number) == (
            m.job_id,
            worker,
            m.lease_seq,
            m.attempt,
        )
        m.last_lease = lease
        return lease

    @precondition(some_lease_issued)
    @rule(target=leases, pick=lease_picks(leases))
    def renew(self, pick):
        lease = self.lease_from(pick)
        renewed = self.call_with_lease(
            "renew_lease", lease, lambda: services.renew_lease(lease=lease), require_unexpired=True
        )
        if renewed is None:
            return multiple()
        assert (renewed.owner, renewed.token, renewed.attempt_id) == (
            lease.owner,
            lease.token,
            lease.attempt_id,
        )
        assert renewed.expires_at >= lease.expires_at
        self.model_for(lease).last_lease = renewed
        return renewed

    @precondition(some_lease_issued)
    @rule(pick=lease_picks(leases), observed=st.sampled_from(OBSERVED))
    def verify_identity(self, pick, observed):
        lease = self.lease_from(pick)
        m = self.model_for(lease)
        mismatch = any(observed.get(k) != v for k, v in m.identity.items())
        current = m.holds(lease, require_unexpired=True)
        # Identity is checked before any side effect. A mismatch seen after the side effect was
        # submitted cannot block the attempt (blocked => not_attempted, a CHECK constraint):
        # the documented answer is a clean refusal (a LedgerError) that changes nothing. A
        # matching look after the submit may be recorded or refused alike.
        after_submit = current and m.side_effect == "submitted"
        misuse = (
            "identity mismatch after the side effect was submitted" if after_submit and mismatch else None
        )
        may_refuse = "identity checked after the side effect was submitted" if after_submit else None
        try:
            result = self.call_with_lease(
                "verify_identity",
                lease,
                lambda: services.verify_identity(lease=lease, observed=observed),
                require_unexpired=True,
                misuse=misuse,
                may_refuse=may_refuse,
            )
        except services.IdentityMismatch:
            assert current and mismatch, f"unexpected IdentityMismatch for {observed} on {m}"
            if misuse:  # a refusal that must leave the attempt as it was
                attempt = Attempt.objects.get(pk=lease.attempt_id)
                assert (attempt.execution_state, attempt.side_effect_state) == ("running", "submitted")
                PATHS["verify_identity: refused after submit"] += 1
                return
            PATHS["verify_identity: mismatch blocked"] += 1
            m.close("blocked", "not_attempted", "blocked")
            attempt = Attempt.objects.get(pk=lease.attempt_id)
            assert attempt.observed_identity == observed
            assert (attempt.execution_state, attempt.delivery_state) == ("blocked", "acknowledged")
            assert "identity mismatch" in attempt.error
            return
        if result is not None:
            assert not mismatch, f"{observed} does not match {m.identity} but was accepted"
            m.verified = True

    @precondition(some_lease_issued)
    @rule(pick=lease_picks(leases))
    def begin_side_effect(self, pick):
        lease = self.lease_from(pick)
        m = self.model_for(lease)
        misuse = None
        if m.side_effect != "not_attempted":
            misuse = f"side effect already {m.side_effect}"
        elif m.identity and not m.verified:
            misuse = "identity not verified"
        if (
            self.call_with_lease(
                "begin_side_effect",
                lease,
                lambda: services.begin_side_effect(lease=lease),
                require_unexpired=True,
                misuse=misuse,
            )
            is not None
        ):
            m.side_effect = "submitted"

    @precondition(some_lease_issued)
    @rule(pick=lease_picks(leases))
    def record_success(self, pick):
        lease = self.lease_from(pick)
        m = self.model_for(lease)
        ref = f"ref-{lease.owner}-{lease.token}"
        misuse = None if m.side_effect == "submitted" else "nothing was submitted"
        if (
            self.call_with_lease(
                "record_success",
                lease,
                lambda: services.record_success(lease=lease, result_ref=ref),
                require_unexpired=False,
                misuse=misuse,
            )
            is not None
        ):
            m.close("succeeded", "confirmed", "succeeded")
            assert Attempt.objects.get(pk=lease.attempt_id).result_ref == ref

    @precondition(some_lease_issued)
    @rule(pick=lease_picks(leases), retryable=st.booleans())
    def record_failure(self, pick, retryable):
        lease = self.lease_from(pick)
        m = self.model_for(lease)
        if (
            self.call_with_lease(
                "record_failure",
                lease,
                lambda: services.record_failure(lease=lease, error="provider said no", retryable=retryable),
                require_unexpired=False,
            )
            is not None
        ):
            m.close(
                "failed",
                "not_found" if m.side_effect == "submitted" else "not_attempted",
                None if retryable else "failed",
            )
            if retryable:
                m.open_next()

    @precondition(some_lease_issued)
    @rule(pick=lease_picks(leases))
    def record_unknown(self, pick):
        lease = self.lease_from(pick)
        m = self.model_for(lease)
        misuse = None if m.side_effect == "submitted" else "nothing was submitted"
        if (
            self.call_with_lease(
                "record_unknown",
                lease,
                lambda: services.record_unknown(lease=lease, reason="connection dropped"),
                require_unexpired=False,
                misuse=misuse,
            )
            is not None
        ):
            m.close("unknown", "ambiguous", "needs_reconciliation")

    @precondition(lambda self: any(m.execution == "running" for m in self.jobs))
    @rule()
    def sweep(self):
        expected = {"reclaimed": [], "unknown": [], "exhausted": []}
        for m in self.jobs:
            if m.execution == "running" and m.expired:
                expected[m.expire()].append(m.job_id)
        result = services.sweep_expired_leases()
        mine = {m.job_id for m in self.jobs}
        got = {name: sorted(j for j in getattr(result, name) if j in mine) for name in expected}
        assert got == {name: sorted(ids) for name, ids in expected.items()}
        for name, ids in expected.items():
            PATHS[f"sweep: {name}"] += len(ids)

    @precondition(lambda self: any(m.execution == "running" and not m.expired for m in self.jobs))
    @rule(index=st.integers(0, 2))
    def clock_jump(self, index):
        running = [m for m in self.jobs if m.execution == "running" and not m.expired]
        m = running[index % len(running)]
        expire_lease(m.job_id)
        m.expired = True
        PATHS["clock jump past a running lease"] += 1

    # --- invariants ------------------------------------------------------------------------

    @invariant()
    def ledger_check_is_clean(self):
        # Every check of `manage.py ledger_check` after every step, counted in one statement that the
        # connection prepares once: planning the twelve checks was 8.8 of their 9.5 ms a step.
        with psycopg.Cursor(connection.connection) as cursor:  # server-side binding, as preparing needs
            cursor.execute(ALL_CHECKS, prepare=True)
            counts = cursor.fetchone()[0]
        assert not any(counts), [(f.check, f.examples) for f in find_violations() if f.count]

    @invariant()
    def at_most_one_live_attempt_per_job(self):
        with connection.cursor() as cursor:
            cursor.execute(
                """SELECT job_id, count(*) FROM ledger_attempt
                              WHERE execution_state = ANY(%s) GROUP BY job_id HAVING count(*) > 1""",
                [list(LIVE)],
            )
            assert cursor.fetchall() == []

    @invariant()
    def no_attempt_after_an_unknown_one(self):
        """The core invariant: while an attempt is unknown, no later attempt of its job exists
        (so none can have a side effect submitted or confirmed)."""
        with connection.cursor() as cursor:
            cursor.execute("""SELECT j.job_id, u.number, later.number, later.side_effect_state
                              FROM ledger_attempt u
                              JOIN ledger_attempt later ON later.job_id = u.job_id AND later.number > u.number
                              JOIN ledger_job j ON j.id = u.job_id
                              WHERE u.execution_state = 'unknown'""")
            assert cursor.fetchall() == []

    @invariant()
    def stale_writes_changed_nothing(self):
        checks, self.stale_checks = self.stale_checks, []
        for operation, before, after in checks:
            assert after == before, f"a rejected stale {operation} changed an attempt row"

    @invariant()
    def fencing_tokens_and_model_agree_with_the_database(self):
        rows: dict[str, list[tuple]] = {m.job_id: [] for m in self.jobs}
        with connection.cursor() as cursor:
            cursor.execute(
                """SELECT j.job_id, j.status, j.lease_seq, a.number, a.lease_token,
                                     a.execution_state, a.side_effect_state, a.lease_owner,
                                     a.observed_identity IS NOT NULL
                              FROM ledger_job j JOIN ledger_attempt a ON a.job_id = j.id
                              WHERE j.job_id = ANY(%s) ORDER BY j.job_id, a.number""",
                [list(rows)],
            )
            for row in cursor.fetchall():
                rows[row[0]].append(row[1:])
        for m in self.jobs:
            attempts = rows[m.job_id]
            numbers_and_tokens = [(a[2], a[3]) for a in attempts]
            lease_seq = attempts[0][1]
            assert [n for n, _ in numbers_and_tokens] == list(range(1, len(attempts) + 1))
            # fencing tokens strictly increase with the attempt number, and were all issued
            tokens = [t for _, t in numbers_and_tokens if t is not None]
            assert tokens == sorted(set(tokens)), numbers_and_tokens
            assert all(1 <= t <= lease_seq for t in tokens), (numbers_and_tokens, lease_seq)
            # every attempt but a still-queued last one was leased, so it holds a token
            assert all(t is not None for _, t in numbers_and_tokens[:-1]), numbers_and_tokens
            status, lease_seq, number, token, execution, side_effect, owner, verified = attempts[-1]
            got = (number, execution, side_effect, status, lease_seq)
            assert got == (m.attempt, m.execution, m.side_effect, m.status, m.lease_seq), (m, got)
            if m.execution == "running":
                assert (owner, token) == m.holder, (m, owner, token)
                assert verified == m.verified, m


ALL_CHECKS = "SELECT ARRAY[" + ", ".join(f"(SELECT count(*) FROM ({sql}) v)" for _, _, sql in CHECKS) + "]"  # nosec B608  # ledger.invariants' constant SQL

HYPOTHESIS_SETTINGS = settings(
    max_examples=MAX_EXAMPLES,
    stateful_step_count=STEPS,
    deadline=None,
    # The same examples every run (a seed derived from the test): the path counts asserted below
    # are then a property of the code, not of the draw; a random draw missed "verify_identity:
    # accepted" once in a fresh-clone run (2026-12-02) and failed the build for nothing.
    derandomize=True,
    # Swarm testing disables random rules per example; an example without `claim` can make no
    # step and is discarded, hence filter_too_much.
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
    ],
)


def test_random_worker_sequences_keep_every_ledger_invariant(db):
    PATHS.clear()
    run_state_machine_as_test(LedgerMachine, settings=HYPOTHESIS_SETTINGS)
    assert not Job.objects.filter(job_id__startswith="sm-").exists()  # each example rolled back
    # Not vacuous: the examples reached the paths that matter. Only paths that every run hits
    # many times are listed; the rarer ones are pinned by the scripted sequences below.
    for path in (
        "claim: leased attempt 2",
        "claim: refused duplicate_delivery",
        "begin_side_effect: accepted",
        "begin_side_effect: stale",
        "record_failure: accepted",
        "record_success: stale",
        "record_unknown: stale",
        "renew_lease: accepted",
        "renew_lease: stale",
        "verify_identity: accepted",
        "verify_identity: stale",
        "sweep: reclaimed",
        "clock jump past a running lease",
    ):
        assert PATHS[path] > 0, (path, sorted(PATHS.items()))


# --- scripted sequences through the same machine ----------------------------------------------
# The paths the core invariant is about are too rare to leave to chance in a 30-second budget:
# these fixed sequences drive them every run, with the model and every invariant checked after
# each step exactly as in the random run.


def run_steps(machine: LedgerMachine):
    invariants = [
        machine.ledger_check_is_clean,
        machine.at_most_one_live_attempt_per_job,
        machine.no_attempt_after_an_unknown_one,
        machine.stale_writes_changed_nothing,
        machine.fencing_tokens_and_model_agree_with_the_database,
    ]

    def step(rule_method, **arguments):
        result = rule_method(**arguments)
        for check in invariants:
            check()
        return result

    machine.enqueue_jobs()
    step(lambda: None)
    return step


def script_unknown_after_lease_expiry(m, step):
    lease = step(m.claim, index=0, worker="w1")
    step(m.begin_side_effect, pick=lease)
    step(m.clock_jump, index=0)  # the worker stalls mid-call
    step(m.claim, index=0, worker="w2")  # redelivery: the expiry makes it unknown, no retry
    step(m.claim, index=0, worker="w3")
    step(m.record_success, pick=lease)  # the stalled worker comes back: too late
    step(m.begin_side_effect, pick=lease)
    return {
        "claim: refused previous_attempt_unknown": 2,
        "record_success: stale": 1,
        "begin_side_effect: stale": 1,
    }


def script_sweeper_marks_a_submitted_attempt_unknown(m, step):
    lease = step(m.claim, index=1, worker="w1")
    renewed = step(m.renew, pick=lease)
    step(m.begin_side_effect, pick=renewed)
    step(m.clock_jump, index=0)
    step(m.sweep)
    step(m.claim, index=1, worker="w2")
    step(m.record_unknown, pick=lease)
    step(m.record_failure, pick=lease, retryable=True)  # a stale "retryable" must not reopen
    return {
        "sweep: unknown": 1,
        "claim: refused previous_attempt_unknown": 1,
        "record_unknown: stale": 1,
        "record_failure: stale": 1,
    }


def script_worker_reports_unknown(m, step):
    lease = step(m.claim, index=0, worker="w1")
    step(m.begin_side_effect, pick=lease)
    step(m.record_unknown, pick=lease)
    step(m.claim, index=0, worker="w2")
    step(m.renew, pick=lease)
    step(m.record_success, pick=lease)
    return {
        "record_unknown: accepted": 1,
        "claim: refused previous_attempt_unknown": 1,
        "renew_lease: stale": 1,
        "record_success: stale": 1,
    }


def script_attempts_run_out(m, step):
    first = step(m.claim, index=0, worker="w1")
    step(m.clock_jump, index=0)
    second = step(m.claim, index=0, worker="w2")  # reclaims attempt 2
    step(m.clock_jump, index=0)
    step(m.sweep)  # reopens attempt 3
    third = step(m.claim, index=0, worker="w3")
    step(m.begin_side_effect, pick=first)
    step(m.record_success, pick=second)
    step(m.clock_jump, index=0)
    step(m.sweep)  # nothing submitted, no attempt left: the job fails
    step(m.claim, index=0, worker="w1")
    step(m.renew, pick=third)
    return {
        "claim: leased attempt 3": 1,
        "sweep: reclaimed": 1,
        "sweep: exhausted": 1,
        "claim: refused duplicate_delivery": 1,
        "begin_side_effect: stale": 1,
        "record_success: stale": 1,
        "renew_lease: stale": 1,
    }


def script_success_after_retryable_failure(m, step):
    lease = step(m.claim, index=1, worker="w1")
    step(m.begin_side_effect, pick=lease)
    step(m.record_failure, pick=lease, retryable=True)  # provider refused: attempt 2, same key
    retry = step(m.claim, index=1, worker="w2")
    step(m.begin_side_effect, pick=retry)
    step(m.record_success, pick=lease)
    step(m.record_success, pick=retry)
    step(m.claim, index=1, worker="w3")
    return {
        "record_failure: accepted": 1,
        "claim: leased attempt 2": 1,
        "record_success: stale": 1,
        "record_success: accepted": 1,
        "claim: refused duplicate_delivery": 1,
    }


def script_identity_mismatch_blocks(m, step):
    lease = step(m.claim, index=2, worker="w1")
    step(m.begin_side_effect, pick=lease)  # bound job: identity first
    step(m.verify_identity, pick=lease, observed={"account": "b"})
    step(m.claim, index=2, worker="w2")
    step(m.begin_side_effect, pick=lease)
    return {
        "begin_side_effect: refused (identity not verified)": 1,
        "verify_identity: mismatch blocked": 1,
        "claim: refused attempt_blocked": 1,
        "begin_side_effect: stale": 1,
    }


def script_identity_mismatch_after_submit(m, step):
    lease = step(m.claim, index=2, worker="w1")
    step(m.verify_identity, pick=lease, observed={"account": "a"})
    step(m.begin_side_effect, pick=lease)
    # A second look at the identity, after the call went out, sees another account: the attempt
    # cannot be blocked (its effect may have happened); a clean refusal must change nothing.
    step(m.verify_identity, pick=lease, observed={"account": "b"})
    refusals = [path for path in PATHS if path.startswith("verify_identity: refused")]
    assert [PATHS[path] for path in refusals] == [1], sorted(PATHS.items())
    step(m.record_success, pick=lease)  # the worker still owns the outcome of its call
    return {"verify_identity: accepted": 1, "begin_side_effect: accepted": 1, "record_success: accepted": 1}


SCRIPTS = [
    script_unknown_after_lease_expiry,
    script_sweeper_marks_a_submitted_attempt_unknown,
    script_worker_reports_unknown,
    script_attempts_run_out,
    script_success_after_retryable_failure,
    script_identity_mismatch_blocks,
    script_identity_mismatch_after_submit,
]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda f: f.__name__.removeprefix("script_"))
def test_scripted_sequences_keep_every_ledger_invariant(db, script):
    PATHS.clear()
    machine = LedgerMachine()
    expected = script(machine, run_steps(machine))
    reached = {path: PATHS[path] for path in expected}
    assert reached == expected, sorted(PATHS.items())
