"""The approvals page's pending requests: filtered, with each job's comments and dissent attached.

Pending requests are few (at most one per job awaiting approval), so the page reads them all, and
the dissent (a comment by anyone but the requester) is counted in Python from one query."""

from __future__ import annotations

from dataclasses import dataclass

from approvals.models import ApprovalRequest, ApprovalStatus
from approvals.services import payload_digest
from console.access import TenantFence
from ledger.models import LedgerEvent
from ledger.states import EventKind

SORTS = {"oldest": "oldest first", "newest": "newest first", "dissent": "dissent first"}
DISSENT = {"": "with or without dissent", "with": "with dissent only", "without": "without dissent only"}


@dataclass(frozen=True)
class ApprovalFilter:
    action: str = ""
    tenant: str = ""
    requested_by: str = ""
    search: str = ""  # the start of a job id
    dissent: str = ""  # "", "with" or "without"
    sort: str = "oldest"

    @property
    def narrowed(self) -> bool:
        return bool(self.action or self.tenant or self.requested_by or self.search or self.dissent)


def pending_requests(spec: ApprovalFilter, fence: TenantFence, user) -> list[ApprovalRequest]:
    """The pending requests `spec` matches, in its order; each with `comments`, `dissent` (the
    comments of anyone but the requester: a colleague who disagrees, or who saw something),
    `own`, `payload_changed` and `first_call` (an agent's irreversible tool, not yet run once)."""
    requests = fence.apply(
        ApprovalRequest.objects.select_related("job", "attempt", "requested_by").filter(status=ApprovalStatus.PENDING)
    )
    if spec.action:
        requests = requests.filter(job__action=spec.action)
    if spec.tenant:
        requests = requests.filter(job__tenant__iexact=spec.tenant)
    if spec.requested_by:
        requests = requests.filter(requested_by_actor__iexact=spec.requested_by)
    if spec.search:
        requests = requests.filter(job__job_id__istartswith=spec.search)
    pending = list(requests.order_by(*(("-created_at", "-id") if spec.sort == "newest" else ("created_at", "id"))))
    comments = comments_by_job([item.job_id for item in pending])
    for item in pending:
        item.comments = comments.get(item.job_id, [])
        item.dissent = [c for c in item.comments if c.actor != item.requested_by_actor]
        item.own = item.requested_by_id == user.pk
        item.payload_changed = payload_digest(item.job.payload) != item.payload_digest
        item.first_call = is_first_call(item)
    if spec.dissent:
        pending = [item for item in pending if bool(item.dissent) == (spec.dissent == "with")]
    if spec.sort == "dissent":
        pending.sort(key=lambda item: not item.dissent)  # stable: oldest first within each
    return pending


def is_first_call(request: ApprovalRequest) -> bool:
    """An MCP tool call held before its first run (the gateway asks before calling an
    irreversible tool): nothing is replayed, the call has not happened yet."""
    return request.job.action.startswith("mcp:") and request.attempt.number == 1 and "tool" in request.evidence


def pending_actions(fence: TenantFence) -> list[str]:
    """The actions of the pending requests, for the filter's menu."""
    requests = fence.apply(ApprovalRequest.objects.filter(status=ApprovalStatus.PENDING))
    return sorted(set(requests.values_list("job__action", flat=True)))


def comments_by_job(job_pks: list[int]) -> dict[int, list[LedgerEvent]]:
    """Each job's comments, oldest first: a colleague's dissent is read before the decision."""
    comments: dict[int, list[LedgerEvent]] = {}
    for event in LedgerEvent.objects.filter(job_id__in=job_pks, kind=EventKind.JOB_COMMENTED).order_by("id"):
        comments.setdefault(event.job_id, []).append(event)
    return comments
