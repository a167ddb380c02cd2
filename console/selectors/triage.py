"""Why a job waits and what to do next, in one line each: what an operator reads in a queue row
and at the top of the job page, without opening the history.

The reason comes from what the page already loaded (the job, its latest attempt) and from the
job's latest telling event, read for a whole page of jobs in one query that walks the
(job, id) index backwards per job: no query per row, no scan of the history.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from urllib.parse import parse_qs, urlsplit

from django.conf import settings

from ledger import endpoints
from ledger.models import Attempt, Job, LedgerEvent
from ledger.states import UNKNOWN_WORK, EventKind, Execution, JobStatus, SideEffect

# Events that say nothing about why a job waits: refusals and repeats leave its state as it was.
QUIET_KINDS = (
    EventKind.CLAIM_REFUSED,
    EventKind.DUPLICATE_DELIVERY,
    EventKind.LEASE_RENEWED,
    EventKind.ENQUEUE_REPEATED,
    EventKind.LATE_WRITE_REJECTED,
    EventKind.RECONCILIATION_ANSWER_REFUSED,
    EventKind.JOB_COMMENTED,
)

LATEST_TELLING_EVENTS = f"""
SELECT e.id, e.job_id, e.kind, e.actor, e.actor_type, e.note, e.evidence, e.at
FROM unnest(%s::bigint[]) AS page(job_id)
CROSS JOIN LATERAL (
    SELECT id, job_id, kind, actor, actor_type, note, evidence, at FROM {LedgerEvent._meta.db_table}
    WHERE job_id = page.job_id AND NOT (kind = ANY(%s))
    ORDER BY job_id DESC, id DESC LIMIT 1  -- the order of event_job_id (job, id): one short walk per job
) AS e
"""  # nosec B608  # the table name is the model's; values are bound


# Jobs outside the unknown-work queue: nothing waits for a decision.
SETTLED = {
    JobStatus.PENDING: ("queued for a worker", "a worker claims it"),
    JobStatus.RUNNING: ("a worker holds its lease", "wait for the attempt to finish or its lease to expire"),
    JobStatus.SUCCEEDED: ("done: the effect happened", "nothing left to do"),
    JobStatus.FAILED: ("failed: nothing was done", "retry it as is or with a corrected payload, or close it"),
    JobStatus.CANCELLED: ("cancelled", "nothing left to do"),
}


@dataclass(frozen=True)
class Triage:
    reason: str  # why the job waits, one line
    next_step: str  # what happens next, or what the operator can do
    until: datetime | None = None  # when the next automatic step is due (a back-off), if any
    sent: bool = True  # False: the attempt provably sent nothing (blocked before its side effect)


def attach_triage(jobs: list[Job]) -> None:
    """Give each job (with `latest`, its latest attempt, attached) its `triage`, in one query."""
    events = latest_telling_events([job.pk for job in jobs])
    for job in jobs:
        job.triage = triage(job, getattr(job, "latest", None), events.get(job.pk))


def latest_telling_events(job_pks: list[int]) -> dict[int, LedgerEvent]:
    if not job_pks:
        return {}
    rows = LedgerEvent.objects.raw(LATEST_TELLING_EVENTS, [job_pks, [k.value for k in QUIET_KINDS]])
    return {event.job_id: event for event in rows}


def triage(job: Job, attempt: Attempt | None, event: LedgerEvent | None) -> Triage:
    kind = event.kind if event else ""
    note = event.note if event else ""
    if job.status == JobStatus.FAILED and attempt is not None and attempt.error:
        return Triage(f"failed: {attempt.error}", SETTLED[job.status][1])
    if job.status not in UNKNOWN_WORK:
        return Triage(*SETTLED[job.status])
    if attempt is not None and attempt.execution_state == Execution.BLOCKED:
        return _blocked(job, attempt)
    if job.status == JobStatus.NEEDS_RECONCILIATION:
        if kind == EventKind.RECONCILIATION_UNAVAILABLE:
            evidence = event.evidence or {}
            elsewhere = endpoints.mismatch(asked=str(evidence.get("asked", "")), sent_to=str(evidence.get("sent_to", "")))
            if elsewhere:  # asking again will not help: the reconciler looks at another provider
                return Triage(f"the reconciler {elsewhere}, so it cannot tell",
                              "point the reconciler at that provider, or check there by hand and decide; "
                              f"it asks again (check {job.check_count} of {settings.RECKON_RECONCILE_MAX_CHECKS}) "
                              "after back-off until", until=job.next_check_at)
            said = evidence.get("reason") or note
            return Triage(f"{provider_of(job.action)} gave no definite answer: {said}",
                          f"the reconciler asks again (check {job.check_count} of "
                          f"{settings.RECKON_RECONCILE_MAX_CHECKS}); back-off until",
                          until=job.next_check_at)
        lost = attempt.error if attempt is not None and attempt.error else "the attempt's outcome is unknown"
        return Triage(lost, f"the reconciler looks it up at {provider_of(job.action)} now")
    if job.status == JobStatus.NEEDS_OPERATOR:
        if kind == EventKind.NOT_QUERYABLE:
            return Triage(f"{job.action} cannot be queried at its provider"
                          + (f"; {attempt.error}" if attempt is not None and attempt.error else ""),
                          "check by hand, then confirm the effect or mark it not found")
        if kind == EventKind.RECONCILIATION_GAVE_UP:
            return Triage(note, "check by hand, then confirm the effect or mark it not found")
        if kind == EventKind.APPROVAL_EXPIRED:
            return Triage(f"the replay's approval request expired at {event.at:%Y-%m-%d %H:%M} UTC without a decision",
                          "back to the operators: ask for approval again, escalate, or cancel")
        if kind == EventKind.APPROVAL_REJECTED:
            return Triage(f"replay rejected by {event.actor}" + (f": {note}" if note else ""),
                          "ask for approval again with more evidence, escalate, or cancel the job")
    if job.status == JobStatus.ESCALATED:
        who = f"escalated by {event.actor}" if kind in (EventKind.OPERATOR_ESCALATED, EventKind.RECONCILED_CONFLICT) else "escalated"
        return Triage(f"{who}: {note}" if note else who, "someone with more context decides")
    if job.status == JobStatus.AWAITING_APPROVAL and attempt is not None \
            and attempt.side_effect_state == SideEffect.NOT_ATTEMPTED and job.action.startswith("mcp:"):
        # The MCP gateway asks before an irreversible tool's first call: nothing has run.
        return Triage("an agent's first call of this irreversible MCP tool waits for a second person; nothing has run",
                      "an approver approves or rejects it on the Approvals page; the agent's next identical call "
                      "then runs it", sent=False)
    if job.status == JobStatus.AWAITING_APPROVAL:
        return Triage("a replay of this irreversible action waits for a second person",
                      "an approver approves or rejects it on the Approvals page")
    return Triage(note or (attempt.error if attempt is not None else "") or job.status, "decide on the job page")


def _blocked(job: Job, attempt: Attempt) -> Triage:
    observed = attempt.observed_identity or {}
    differing = [(k, v, observed.get(k)) for k, v in job.identity.items() if observed.get(k) != v]
    if not differing:
        return Triage("identity re-checked: the binding matches now; nothing was sent",
                      "replay with the same key, or cancel the job", sent=False)
    return Triage(
        "identity mismatch: " + "; ".join(f"{k} expected {want!r}, seen {seen!r}" for k, want, seen in differing),
        "fix the worker's login, then re-check identity; or cancel the job (nothing was sent)",
        sent=False,
    )


def provider_of(action: str) -> str:
    """The provider part of an action's name ("billing" for billing.create_invoice)."""
    return action.split(".", 1)[0]


def reconciler_label(action: str, reconciler: str) -> str:
    """A reconciler as its action's lookup, not a Python path or a URL (those go in a title)."""
    if reconciler.startswith("webhook "):
        return f"{action} (webhook)"
    if reconciler.startswith("external"):
        return f"{action} (your agents)"
    return f"{action} lookup"


def evidence_summary(action: str, outcome: str, evidence: dict) -> str:
    """What the provider said, in a sentence: "billing: invoice in_123 found by idempotency key"."""
    evidence = evidence or {}
    reason = str(evidence.get("reason", "")).strip()
    found_by = ""
    for lookup in evidence.get("lookups") or []:
        if isinstance(lookup, dict) and lookup.get("found"):
            query = parse_qs(urlsplit(str(lookup.get("url", ""))).query)
            found_by = "idempotency key" if "idempotency_key" in query else "marker" if "marker" in query else ""
            break
    if reason.endswith(" found at the provider") and found_by:
        reason = reason.removesuffix(" at the provider") + f" by {found_by}"
    return f"{provider_of(action)}: {reason or outcome}"
