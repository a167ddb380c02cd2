"""Everything the job page shows about one job, in a fixed number of queries."""

from __future__ import annotations

from dataclasses import dataclass

from django.shortcuts import get_object_or_404

from approvals.models import ApprovalRequest, ApprovalStatus
from console.access import TenantFence
from console.selectors.triage import QUIET_KINDS, Triage, triage
from ledger.actions import GATEWAY_RESULT, is_gateway_action
from ledger.invariants import first_broken_event
from ledger.models import Attempt, Job, LedgerEvent
from ledger.states import EventKind
from reconciliation.models import CheckOutcome, ReconciliationCheck


@dataclass
class JobRecord:
    job: Job
    attempts: list[Attempt]
    events: list[LedgerEvent]
    checks: list[ReconciliationCheck]
    approvals: list[ApprovalRequest]
    first_broken_event: int | None  # the id of the first event whose hash link fails; None: verified

    @property
    def latest(self) -> Attempt | None:
        return self.attempts[-1] if self.attempts else None

    @property
    def not_found_reason(self) -> str:
        """Why a replay is safe, when the latest reconciliation found nothing at the provider."""
        check = self.checks[-1] if self.checks else None
        if check is None or check.outcome != CheckOutcome.NOT_FOUND:
            return ""
        return check.evidence.get("reason", "")

    # Every refused duplicate is counted on the job; the history keeps the first per worker and
    # attempt (ledger.services.worker._first_refusal), so the figure is the job's counter.
    @property
    def duplicate_deliveries(self) -> int:
        return self.job.duplicate_deliveries

    @property
    def triage(self) -> Triage:
        telling = next((e for e in reversed(self.events) if e.kind not in QUIET_KINDS), None)
        return triage(self.job, self.latest, telling)

    @property
    def hold_reason(self) -> str:
        """What the holder said they are doing, when they took the job ("" when they said nothing)."""
        if not self.job.holder:
            return ""
        taken = next((e for e in reversed(self.events) if e.kind == EventKind.JOB_TAKEN), None)
        return hold_reason_of(taken) if taken and taken.actor == self.job.holder else ""

    @property
    def earlier_events(self) -> list[LedgerEvent]:
        """The history before the latest attempt opened: the job page folds it away."""
        if len(self.attempts) < 2:
            return []
        first = next((i for i, e in enumerate(self.events) if e.attempt_id == self.latest.pk), len(self.events))
        return self.events[:first]

    @property
    def latest_events(self) -> list[LedgerEvent]:
        return self.events[len(self.earlier_events):]

    @property
    def broken_in_earlier(self) -> bool:
        return any(e.pk == self.first_broken_event for e in self.earlier_events)

    @property
    def expired_approval(self) -> ApprovalRequest | None:
        """The latest approval request, when it expired without a decision."""
        latest = self.approvals[0] if self.approvals else None
        return latest if latest is not None and latest.status == ApprovalStatus.EXPIRED else None


@dataclass(frozen=True)
class McpCall:
    """A tool call the MCP gateway journaled (an `mcp:` action), as the job's page shows it."""

    upstream: str
    tool: str
    agents: list[str]  # the attempts' workers: the agent's token name and its MCP client
    arguments: dict  # as recorded: redacted arguments never reach the ledger
    result: dict | None  # the upstream's own result (or tool error)
    found: dict | None  # what a reconciler found of the effect ({"item", "lookup"}), when it was confirmed so
    answered_from_ledger: int  # later calls with the same key, answered without calling the upstream


def mcp_call(record: JobRecord) -> McpCall | None:
    if not is_gateway_action(record.job.action):
        return None
    payload = record.job.payload
    # The gateway's evidence keys (gateway/reconcile.py): the tool's result, the effect a reconciler
    # found and the look-up it asked (a look-up's answer is never shown as the tool's result).
    results = [event.evidence[GATEWAY_RESULT] for event in record.events
               if GATEWAY_RESULT in event.evidence and ("lookup" not in event.evidence or "mcp_found" in event.evidence)]
    found = [{"item": event.evidence.get("mcp_found", event.evidence.get(GATEWAY_RESULT)),
              "lookup": event.evidence.get("lookup")} for event in record.events
             if "mcp_found" in event.evidence or ("lookup" in event.evidence and GATEWAY_RESULT in event.evidence)]
    agents = list(dict.fromkeys(a.lease_owner for a in record.attempts if a.lease_owner)) or \
        list(dict.fromkeys(e.actor for e in record.events if e.kind == EventKind.ENQUEUED))
    return McpCall(upstream=payload.get("upstream", ""), tool=payload.get("tool", ""), agents=agents,
                   arguments=payload.get("arguments", {}), result=results[-1] if results else None,
                   found=found[-1] if found else None,
                   answered_from_ledger=sum(1 for e in record.events if e.kind == EventKind.ENQUEUE_REPEATED))


def job_record(job_id: str, fence: TenantFence) -> JobRecord:
    """404 for a job outside the fence, exactly as for a missing one."""
    job = get_object_or_404(fence.jobs(), job_id=job_id)
    return JobRecord(
        job=job,
        attempts=list(job.attempts.order_by("number")),
        events=list(job.events.select_related("attempt").order_by("id")),
        checks=list(ReconciliationCheck.objects.filter(job=job).select_related("attempt").order_by("id")),
        approvals=list(
            ApprovalRequest.objects.filter(job=job)
            .select_related("attempt", "requested_by", "decided_by")
            .order_by("-id")
        ),
        first_broken_event=first_broken_event(job.pk),
    )


def hold_reason_of(event: LedgerEvent) -> str:
    return (event.evidence or {}).get("reason", "")
