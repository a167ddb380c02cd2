"""The worker loop's steps for a batch of leases: begin N side effects, record N results.

A batch is the same door as one job, with N jobs. Each step runs its batch database function
(reckon_begin_many, reckon_succeed_many: one statement per table for the whole batch, the one-job
functions' rules; ledger.fastpath BATCH_STATEMENTS) in one transaction: one synchronous
commit makes every begun side effect durable before the caller sends any of them, and one commit
records every result. Each job keeps its own attempt, fencing token, events and hash-chain links.

A job the function declines goes through the one-job step (begin_side_effect, record_success,
record_failure, record_unknown), in the same transaction, which decides as it always does: a
refusal (a stale fencing token, an expired lease, a job outside the caller's scope) is recorded
and refuses that job alone, and the batch's answer says so in its place. The others proceed.

Claiming N jobs is ledger.services.pulling.claim_next_jobs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from django.db import transaction

from ledger import fastpath
from ledger.models import Attempt
from ledger.scope import EVERYTHING, Scope
from ledger.services.errors import LedgerError
from ledger.services.worker import (
    Lease,
    begin_side_effect,
    record_failure,
    record_success,
    record_unknown,
    recorded_sent_to,
    resolved,
)

# What a batch step answers, in the order of its leases: the attempt the step left, or the
# refusal of that job alone (nothing of it changed, except the event recording a stale write).
Done = Attempt | LedgerError


def begin_side_effects(*, leases: list[Lease], sent_to: str | None = None, scope: Scope = EVERYTHING) -> list[Done]:
    """begin_side_effect for every lease, in one transaction: after it returns, the effect of every
    lease answered with an attempt may be sent, and no other."""
    answers: list[Done | None] = [None] * len(leases)
    try:
        recorded = recorded_sent_to(sent_to)
    except LedgerError as refused:  # bad input: every job refused, nothing written
        return [refused] * len(leases)
    rows = [{"job": lease.job_id, "attempt": lease.attempt_id, "owner": lease.owner, "token": lease.token,
             "sent_to": recorded} for lease in leases]
    with transaction.atomic():
        if leases:
            for place, attempt in fastpath.begin_many(leases=rows, scope=scope).items():
                answers[place] = attempt
        for place, lease in enumerate(leases):
            if answers[place] is None:
                answers[place] = _alone(begin_side_effect, lease=lease, sent_to=sent_to, scope=scope)
    return answers


@dataclass(frozen=True)
class Outcome:
    """What became of one lease's side effect, as record_success/record_failure/record_unknown take it."""

    lease: Lease
    verdict: Literal["succeeded", "failed", "unknown"]
    result_ref: str = ""  # succeeded
    error: str = ""  # failed: why the provider refused; unknown: why the worker cannot tell
    retryable: bool = False  # failed
    evidence: dict | None = None

    @classmethod
    def succeeded(cls, lease: Lease, result_ref: str = "", evidence: dict | None = None) -> Outcome:
        return cls(lease, "succeeded", result_ref=result_ref, evidence=evidence)

    @classmethod
    def failed(cls, lease: Lease, error: str, *, retryable: bool = False, evidence: dict | None = None) -> Outcome:
        return cls(lease, "failed", error=error, retryable=retryable, evidence=evidence)

    @classmethod
    def unknown(cls, lease: Lease, reason: str, evidence: dict | None = None) -> Outcome:
        return cls(lease, "unknown", error=reason, evidence=evidence)


def record_results(*, outcomes: list[Outcome], scope: Scope = EVERYTHING) -> list[Done]:
    """Every outcome recorded in one transaction: the successes by reckon_succeed in one statement,
    any other (and a success the function declined) by its one-job step."""
    answers: list[Done | None] = [None] * len(outcomes)
    successes = [(place, outcome) for place, outcome in enumerate(outcomes) if outcome.verdict == "succeeded"]
    rows = [{"job": o.lease.job_id, "attempt": o.lease.attempt_id, "owner": o.lease.owner, "token": o.lease.token,
             "result_ref": o.result_ref, "evidence": o.evidence or {}} for _, o in successes]
    with transaction.atomic():
        if rows:
            for at, attempt in fastpath.succeed_many(leases=rows, scope=scope).items():
                answers[successes[at][0]] = attempt
        for place, outcome in enumerate(outcomes):
            if answers[place] is None:
                answers[place] = _alone(_record, outcome=outcome, scope=scope)
    return answers


def _record(*, outcome: Outcome, scope: Scope) -> Attempt:
    if outcome.verdict == "succeeded":
        return record_success(lease=outcome.lease, result_ref=outcome.result_ref, evidence=outcome.evidence,
                              scope=scope)
    lease = resolved(outcome.lease, scope)
    if outcome.verdict == "failed":
        return record_failure(lease=lease, error=outcome.error, retryable=outcome.retryable,
                              evidence=outcome.evidence)
    return record_unknown(lease=lease, reason=outcome.error, evidence=outcome.evidence)


def _alone(step, **arguments) -> Done:
    """One job's step inside the batch's transaction. Its refusal is its answer: the step has
    already written what a refusal writes (its own savepoint, kept), and the batch goes on."""
    try:
        return step(**arguments)
    except LedgerError as refused:
        return refused
