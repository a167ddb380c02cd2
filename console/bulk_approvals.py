"""Approve or reject many pending approval requests at once, each on its own.

Each request goes through `approvals.services` exactly as one decided on its own would (its own
transaction, four eyes from the job's whole history, the payload digest, the database's trigger),
and the outcome is reported per request. One rule is added for the many: a request whose job
carries a colleague's comment (dissent) is never decided in bulk, because the comment must be read
first; it is refused here and left for a decision on its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from approvals import services as approval_services
from approvals.models import ApprovalRequest
from console.access import TenantFence
from console.selectors.approvals import comments_by_job
from reconciliation.registry import REGISTRY

# A bulk decision is bounded: a page of requests, not an unbounded loop in one web request.
MOST = 200


@dataclass(frozen=True)
class Outcome:
    request_id: int
    job_id: str
    level: str  # "success" or "error"
    text: str


def decide_requests(decision: str, *, request_ids: list[int], user, note: str, fence: TenantFence) -> list[Outcome]:
    """`decision` ("approve" or "reject") on each of `request_ids`, one transaction each."""
    if decision not in ("approve", "reject"):
        raise ValueError(f"{decision!r} is not an approval decision")
    service = getattr(approval_services, decision)
    by_id = {r.pk: r for r in fence.apply(ApprovalRequest.objects.select_related("job")).filter(pk__in=request_ids)}
    comments = comments_by_job([r.job_id for r in by_id.values()])
    outcomes = []
    for request_id in request_ids[:MOST]:
        request = by_id.get(request_id)
        if request is None:  # outside the user's tenants it does not exist for them
            outcomes.append(Outcome(request_id, "", "error", f"no approval request {request_id}"))
            continue
        job_id = request.job.job_id
        dissent = [c for c in comments.get(request.job_id, []) if c.actor != request.requested_by_actor]
        if dissent:
            outcomes.append(Outcome(request_id, job_id, "error",
                                    f"{dissent[-1].actor} commented on this job ({len(dissent)} comment"
                                    f"{'s' if len(dissent) > 1 else ''} of dissent): decide it on its own, "
                                    "after reading them"))
            continue
        try:
            service(request_id=request_id, user=user, note=note)
        except approval_services.ApprovalRefused as refused:
            outcomes.append(Outcome(request_id, job_id, "error", str(refused)))
        else:
            outcomes.append(Outcome(request_id, job_id, "success", f"replay {REGISTRY[decision].done}"))
    for request_id in request_ids[MOST:]:
        outcomes.append(Outcome(request_id, "", "error", f"not decided: at most {MOST} requests at once"))
    return outcomes
