"""Pull-mode reconciliation: agents that cannot expose an endpoint claim unknown work over the API.

An action declared with `reconciler = "external"` is left alone by Reckon's own reconciler.
Its agents call `claim_reconciliation`, which hands out the most overdue unknown job in their
scope with a short reconciliation lease (the job's next look moves out by the lease, so no other
agent takes it), and answer with `answer_reconciliation` under the same rules as every
reconciler: four outcomes, `not_found` only with a reason, back-off, approvals for irreversible
replays, one ReconciliationCheck per look.

The lease is named by a token that pins the attempt, its version and the claim's mark. An answer
whose lease moved on (another agent claimed the job after this lease ran out, or the job was
resolved meanwhile), or about a job whose action agents do not reconcile, changes nothing and
writes nothing: it is refused (the caller counts refusals; a history event per refusal would let
any retry loop fill the history with the evidence it sends). An applied answer is recorded under
the caller's `By` (the agent and its token), with the person behind it, who may not approve a
replay it leads to.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import transaction

from ledger.actions import PullReconciler, declared_action, registered_actions
from ledger.models import Attempt, Job
from ledger.services import (
    Batch,
    LedgerError,
    claim_for_reconciliation,
    latest_attempt,
    lock_job,
)
from ledger.states import ActorType
from reconciliation.applying import Decision, apply_looks, waiting
from reconciliation.findings import REPORTED, Finding, prefetch_reported, where_it_was_sent
from reconciliation.lookups import Look
from reconciliation.models import CheckOutcome
from reconciliation.resolution import By

ANSWERS = (CheckOutcome.CONFIRMED, CheckOutcome.NOT_FOUND, CheckOutcome.CONFLICT, CheckOutcome.UNAVAILABLE)


class AnswerRefused(LedgerError):
    """The answer came after its reconciliation lease moved on, or is about a job agents do not
    reconcile; nothing changed and nothing was written."""


@dataclass(frozen=True)
class Claimed:
    job: Job
    attempt: Attempt
    token: str
    expires_at: datetime

    @property
    def evidence_so_far(self) -> dict:
        return {"provider_answers": getattr(self.attempt, REPORTED, None) or []}


def claim_reconciliation(*, allows, actions=None, tenants=None) -> Claimed | None:
    """The most overdue unknown job of a pull-mode action that `allows(tenant=, action=)`, claimed
    for the action's reconciliation lease; None when nothing is due."""
    pull = {a.name: a.reconciler for a in registered_actions() if isinstance(a.reconciler, PullReconciler)}
    names = [name for name in pull if actions is None or name in actions]
    if tenants is not None and not tenants:
        return None  # no tenant: nothing to claim
    for name in names:  # each action has its own lease length
        jobs = claim_for_reconciliation(limit=1, actions=[name], tenants=tenants, hold=pull[name].lease)
        # Tenants outside the caller's scope are filtered by the claim itself when `tenants` is
        # given; a claim the caller may not see is handed back at once.
        for job in jobs:
            if not allows(tenant=job.tenant, action=job.action):
                _hand_back(job)
                continue
            attempt = latest_attempt(job)
            if not waiting(job, attempt):
                continue
            prefetch_reported([attempt])
            return Claimed(job, attempt, _token(job, attempt), job.next_check_at)
    return None


def answer_reconciliation(*, token: str, by: By | str, outcome: str, reason: str = "",
                          evidence: dict | None = None, result_ref: str = "", asked: str = "") -> Decision:
    """Apply an answer under the lease `token` names, as `by` (an agent's name, or a `By` with the
    person behind it), or refuse it if that lease moved on or the job's action is not reconciled
    by agents. `not_found` without a reason proves nothing, as from any reconciler, and neither
    does one from another provider than the attempt's effect went to (`asked`, when the agent says)."""
    if isinstance(by, str):
        by = By(by, ActorType.RECONCILER)
    job_pk, attempt_pk, version, mark = _parse(token)
    finding = Finding(outcome, reason, {**(evidence or {}), "agent": by.actor}, result_ref=result_ref, asked=asked)
    if outcome == CheckOutcome.NOT_FOUND and not reason.strip():
        finding = Finding(CheckOutcome.UNAVAILABLE, "not_found without a stated reason why a replay is safe",
                          finding.evidence, asked=asked)
    with transaction.atomic():
        job_id = Job.objects.filter(pk=job_pk).values_list("job_id", flat=True).first()
        if job_id is None:
            raise AnswerRefused("no such reconciliation")
        job = lock_job(job_id=job_id)
        action = declared_action(job.action)
        if action is None or not isinstance(action.reconciler, PullReconciler):
            raise AnswerRefused(f"answer {outcome} by {by.actor} refused: job {job.job_id}'s action {job.action} "
                                "is not reconciled by agents, so no agent's answer can apply to it")
        attempt = latest_attempt(job)
        held = job.next_check_at is not None and _stamp(job.next_check_at) == mark
        if not held or attempt.pk != attempt_pk or attempt.version != version or not waiting(job, attempt):
            raise AnswerRefused(f"answer {outcome} by {by.actor} refused: its reconciliation lease moved on (the "
                                f"job is {job.status}, attempt {attempt.number} version {attempt.version}"
                                + ("" if held else ", claimed again or rescheduled since") + ")")
        finding = where_it_was_sent(attempt, finding)
        [decision] = apply_looks([Look(job, attempt, f"external agent {by.actor}"[:200], finding, by=by)])
    return decision


def _hand_back(job: Job) -> None:
    """Undo a claim the caller may not see: the job is due again at once."""
    with transaction.atomic():
        locked = lock_job(job_id=job.job_id)
        if locked.next_check_at == job.next_check_at:
            with Batch() as batch:
                batch.update_job(locked, next_check_at=job.was_due)


def _stamp(moment: datetime) -> int:
    return int(moment.timestamp() * 1_000_000)


def _token(job: Job, attempt: Attempt) -> str:
    return f"{job.pk}-{attempt.pk}-{attempt.version}-{_stamp(job.next_check_at)}"


def _parse(token: str) -> tuple[int, int, int, int]:
    try:
        job_pk, attempt_pk, version, mark = (int(part) for part in token.split("-"))
    except ValueError:
        raise AnswerRefused(f"{token!r:.80} is not a reconciliation id") from None
    return job_pk, attempt_pk, version, mark
