"""A Hypothesis state machine drives random worker-loop sequences over a small pool of jobs.

Workers claim, renew, verify identity, begin side effects and record outcomes; the lease
sweeper runs; the clock jumps past a running lease. Stale leases stay in play, so late writes
are exercised as often as current ones. A small model predicts the outcome of every call
(accepted, or which documented refusal), and after every step the database is checked against
the model and against the invariants of DESIGN.md, above all:

    no retry may create a new side effect while a previous attempt of the same job is unknown.

All examples run inside one `django_db` test (one transaction); each example uses fresh job
ids, so examples never see each other's jobs (the services use clock_timestamp(), so leases
still expire inside the transaction).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pytest
from django.db import connection
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    multiple,
    rule,
    run_state_machine_as_test,
)

from ledger import services
from ledger.invariants import find_violations
from ledger.models import Attempt, Job, LedgerEvent
from tests.conftest import expire_lease

MAX_ATTEMPTS = 3  # reckon.echo
WORKERS = ("w1", "w2", "w3")
BINDING = {"account": "a"}
OBSERVED = ({"account": "a"}, {"account": "b"}, {}, {"account": "a", "profile": "p1"})
FINISHED = ("succeeded", "failed")


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
    expired: bool = False
    verified: bool = False

    def holds(self, lease: services.Lease, *, require_unexpired: bool) -> bool:
        return (self.execution == "running" and lease.attempt_number == self.attempt
                and self.holder == (lease.owner, lease.token)
                and not (require_unexpired and self.expired))

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
            "not_started", "not_attempted", "pending", False)
        return True

    def expire(self) -> str:
        """The expired running lease is handled (by a claim or the sweeper)."""
        if self.side_effect == "submitted":
            self.close("unknown", "ambiguous", "needs_reconciliation")
            return "unknown"
        self.close("failed", "not_attempted", None)
        return "reclaimed" if self.open_next() else "exhausted"


def attempt_rows(job_id: str) -> list[dict]:
    return list(Attempt.objects.filter(job__job_id=job_id).order_by("number").values())


def event_count(job_id: str, kind: str) -> int:
    return LedgerEvent.objects.filter(job__job_id=job_id, kind=kind).count()


class LedgerMachine(RuleBasedStateMachine):
    leases = Bundle("leases")

    def __init__(self):
        super().__init__()
        self.jobs: list[ModelJob] = []
        self.stale_checks: list[tuple[str, list, list]] = []  # this step's (operation, before, after)

    @initialize(bound=st.booleans())
    def enqueue_jobs(self, bound):
        prefix = uuid.uuid4().hex[:12]
        identities = [{}, {}] + ([BINDING] if bound else [])
        for i, identity in enumerate(identities):
            job_id = f"sm-{prefix}-{i}"
            services.enqueue_job(job_id=job_id, tenant="acme", action="reckon.echo",
                                 payload={"n": i}, identity=identity)
            self.jobs.append(ModelJob(job_id=job_id, identity=identity))

    # --- helpers ---------------------------------------------------------------------------

    def model_for(self, lease: services.Lease) -> ModelJob:
        return next(m for m in self.jobs if m.job_id == lease.job_id)

    def call_with_lease(self, operation: str, lease: services.Lease, call, *, require_unexpired: bool,
                        misuse: str | None = None):
        """Call a lease-holding service; check it refused exactly when it had to.

        `misuse`: why a current holder's call must be refused with LedgerError (or None).
        Returns the result when accepted, None when refused.
        """
        m = self.model_for(lease)
        current = m.holds(lease, require_unexpired=require_unexpired)
        before = attempt_rows(m.job_id)
        rejected_before = event_count(m.job_id, "late_write_rejected")
        try:
            result = call()
        except services.StaleLease:
            after = attempt_rows(m.job_id)
            self.stale_checks.append((operation, before, after))
            event(f"{operation}: stale")
            assert not current, f"{operation} by the current holder {lease} was refused as stale"
            assert event_count(m.job_id, "late_write_rejected") == rejected_before + 1
            return None
        except services.IdentityMismatch:
            raise  # handled by the caller that expects it
        except services.LedgerError as exc:
            assert current, f"{operation} by a stale lease {lease} got {exc!r} instead of StaleLease"
            assert misuse, f"{operation} by the current holder was refused: {exc!r}"
            assert attempt_rows(m.job_id) == before, f"refused {operation} changed an attempt"
            event(f"{operation}: refused ({misuse})")
            return None
        assert current, f"{operation} by a stale lease {lease} was accepted"
        assert not misuse, f"{operation} should have been refused ({misuse}) but was accepted"
        event(f"{operation}: accepted")
        return result

    # --- rules -----------------------------------------------------------------------------

    @rule(target=leases, index=st.integers(0, 2), worker=st.sampled_from(WORKERS))
    def claim(self, index, worker):
        m = self.jobs[index % len(self.jobs)]
        before = attempt_rows(m.job_id)
        duplicates_before = event_count(m.job_id, "duplicate_delivery")
        expected_refusal = None
        changed = False
        if m.status in FINISHED or (m.execution == "running" and not m.expired):
            expected_refusal = "duplicate_delivery"
        else:
            if m.execution == "running":  # expired: this claim handles it first
                m.expire()
                changed = True
            if m.execution != "not_started":
                expected_refusal = {"unknown": "previous_attempt_unknown",
                                    "blocked": "attempt_blocked"}.get(
                    m.execution, "attempts_exhausted" if m.status == "failed" else "not_claimable")
        try:
            lease = services.claim_job(job_id=m.job_id, worker=worker)
        except services.ClaimRefused as refused:
            assert refused.reason == expected_refusal, (refused.reason, expected_refusal, str(refused))
            event(f"claim: refused {refused.reason}")
            if expected_refusal == "duplicate_delivery":
                assert event_count(m.job_id, "duplicate_delivery") == duplicates_before + 1
            if not changed:
                assert attempt_rows(m.job_id) == before, "a refused claim changed an attempt"
            return multiple()
        assert expected_refusal is None, f"claim should have been refused: {expected_refusal}"
        event(f"claim: leased attempt {m.attempt}")
        m.lease_seq += 1
        m.execution, m.status, m.holder, m.expired, m.verified = (
            "running", "running", (worker, m.lease_seq), False, False)
        assert (lease.job_id, lease.owner, lease.token, lease.attempt_number) == (
            m.job_id, worker, m.lease_seq, m.attempt)
        return lease

    @rule(target=leases, lease=leases)
    def renew(self, lease):
        renewed = self.call_with_lease("renew_lease", lease, lambda: services.renew_lease(lease=lease),
                                       require_unexpired=True)
        if renewed is None:
            return multiple()
        assert (renewed.owner, renewed.token, renewed.attempt_id) == (lease.owner, lease.token, lease.attempt_id)
        assert renewed.expires_at >= lease.expires_at
        return renewed

    @rule(lease=leases, observed=st.sampled_from(OBSERVED))
    def verify_identity(self, lease, observed):
        m = self.model_for(lease)
        mismatch = any(observed.get(k) != v for k, v in m.identity.items())
        current = m.holds(lease, require_unexpired=True)
        # Identity is checked before any side effect: a mismatch found after one was submitted
        # cannot block the attempt (blocked => not_attempted); it must be refused cleanly.
        misuse = "identity mismatch after the side effect was submitted" if (
            current and mismatch and m.side_effect == "submitted") else None
        try:
            result = self.call_with_lease("verify_identity", lease,
                                          lambda: services.verify_identity(lease=lease, observed=observed),
                                          require_unexpired=True, misuse=misuse)
        except services.IdentityMismatch:
            assert current and mismatch and not misuse, f"unexpected IdentityMismatch for {observed}"
            m.close("blocked", "not_attempted", "blocked")
            attempt = Attempt.objects.get(pk=lease.attempt_id)
            assert attempt.observed_identity == observed
            assert (attempt.execution_state, attempt.delivery_state) == ("blocked", "acknowledged")
            return
        if result is not None:
            assert not mismatch, f"{observed} does not match {m.identity} but was accepted"
            m.verified = True

    @rule(lease=leases)
    def begin_side_effect(self, lease):
        m = self.model_for(lease)
        misuse = None
        if m.side_effect != "not_attempted":
            misuse = f"side effect already {m.side_effect}"
        elif m.identity and not m.verified:
            misuse = "identity not verified"
        if self.call_with_lease("begin_side_effect", lease, lambda: services.begin_side_effect(lease=lease),
                                require_unexpired=True, misuse=misuse) is not None:
            m.side_effect = "submitted"

    @rule(lease=leases)
    def record_success(self, lease):
        m = self.model_for(lease)
        ref = f"ref-{lease.token}"
        misuse = None if m.side_effect == "submitted" else "nothing was submitted"
        if self.call_with_lease("record_success", lease,
                                lambda: services.record_success(lease=lease, result_ref=ref),
                                require_unexpired=False, misuse=misuse) is not None:
            m.close("succeeded", "confirmed", "succeeded")
            assert Attempt.objects.get(pk=lease.attempt_id).result_ref == ref

    @rule(lease=leases, retryable=st.booleans())
    def record_failure(self, lease, retryable):
        m = self.model_for(lease)
        if self.call_with_lease("record_failure", lease,
                                lambda: services.record_failure(lease=lease, error="provider said no",
                                                                retryable=retryable),
                                require_unexpired=False) is not None:
            m.close("failed", "not_found" if m.side_effect == "submitted" else "not_attempted",
                    None if retryable else "failed")
            if retryable:
                m.open_next()

    @rule(lease=leases)
    def record_unknown(self, lease):
        m = self.model_for(lease)
        misuse = None if m.side_effect == "submitted" else "nothing was submitted"
        if self.call_with_lease("record_unknown", lease,
                                lambda: services.record_unknown(lease=lease, reason="connection dropped"),
                                require_unexpired=False, misuse=misuse) is not None:
            m.close("unknown", "ambiguous", "needs_reconciliation")

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

    @rule(index=st.integers(0, 2))
    def clock_jump(self, index):
        m = self.jobs[index % len(self.jobs)]
        expire_lease(m.job_id)
        if m.execution == "running":
            m.expired = True

    # --- invariants ------------------------------------------------------------------------

    @invariant()
    def ledger_check_is_clean(self):
        assert not [(f.check, f.examples) for f in find_violations() if f.count]

    @invariant()
    def at_most_one_live_attempt_per_job(self):
        with connection.cursor() as cursor:
            cursor.execute("""SELECT job_id, count(*) FROM ledger_attempt
                              WHERE execution_state IN ('not_started', 'running', 'unknown', 'blocked')
                              GROUP BY job_id HAVING count(*) > 1""")
            assert cursor.fetchall() == []

    @invariant()
    def no_attempt_after_an_unknown_one(self):
        """The core invariant: while an attempt is unknown, no later attempt of its job exists."""
        with connection.cursor() as cursor:
            cursor.execute("""SELECT j.job_id, u.number, later.number, later.side_effect_state
                              FROM ledger_attempt u
                              JOIN ledger_attempt later ON later.job_id = u.job_id AND later.number > u.number
                              JOIN ledger_job j ON j.id = u.job_id
                              WHERE u.execution_state = 'unknown'""")
            assert cursor.fetchall() == []

    @invariant()
    def fencing_tokens_increase_with_attempt_number(self):
        for m in self.jobs:
            rows = list(Attempt.objects.filter(job__job_id=m.job_id).order_by("number")
                        .values_list("number", "lease_token", "execution_state"))
            lease_seq = Job.objects.get(job_id=m.job_id).lease_seq
            tokens = [token for _, token, _ in rows if token is not None]
            assert tokens == sorted(set(tokens)), rows
            assert all(1 <= t <= lease_seq for t in tokens), (rows, lease_seq)
            # every attempt but a still-queued last one was leased, so holds a token
            assert all(token is not None for number, token, state in rows
                       if not (number == rows[-1][0] and state == "not_started")), rows

    @invariant()
    def stale_writes_changed_nothing(self):
        checks, self.stale_checks = self.stale_checks, []
        for operation, before, after in checks:
            assert after == before, f"a rejected stale {operation} changed an attempt row"

    @invariant()
    def database_agrees_with_the_model(self):
        for m in self.jobs:
            job = Job.objects.get(job_id=m.job_id)
            latest = Attempt.objects.filter(job=job).order_by("-number").first()
            got = (latest.number, latest.execution_state, latest.side_effect_state, job.status, job.lease_seq)
            assert got == (m.attempt, m.execution, m.side_effect, m.status, m.lease_seq), (m, got)
            if m.execution == "running":
                assert (latest.lease_owner, latest.lease_token) == m.holder
                assert (latest.observed_identity is not None) == m.verified


def test_random_worker_sequences_keep_every_ledger_invariant(db):
    run_state_machine_as_test(
        LedgerMachine,
        settings=settings(max_examples=60, stateful_step_count=30, deadline=None,
                          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                 HealthCheck.too_slow]),
    )
