from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import trigger_client_event

from approvals import services as approval_services
from approvals.models import ApprovalRequest, ApprovalStatus
from console.access import APPROVERS, READERS, fence_of, has_role, role_required
from console.forms import ApprovalDecisionForm
from console.views.queue import QUEUE_CHANGED
from ledger.models import LedgerEvent
from ledger.states import EventKind
from reconciliation.registry import APPROVAL_DECISIONS, REGISTRY

RECENTLY_DECIDED = 20


@require_GET
@role_required(*READERS)
def approvals(request: HttpRequest) -> HttpResponse:
    return render(request, "console/approvals.html", _context(request))


@require_POST
@role_required(APPROVERS)
def decide(request: HttpRequest, request_id: int) -> HttpResponse:
    # A request about a job outside the user's tenants does not exist for them.
    approval = get_object_or_404(fence_of(request.user).apply(ApprovalRequest.objects.select_related("job")),
                                 pk=request_id)
    form = ApprovalDecisionForm(request.POST)
    if form.is_valid():
        decision = form.cleaned_data["decision"]
        try:
            getattr(approval_services, decision)(
                request_id=request_id, user=request.user, note=form.cleaned_data["note"]
            )
        except approval_services.ApprovalRefused as refused:
            notice = ("error", str(refused))
        else:
            notice = ("success", f"Replay of {approval.job.job_id} {REGISTRY[decision].done}.")
    else:
        notice = ("error", "; ".join(e for errors in form.errors.values() for e in errors))
    if not request.htmx:
        messages.add_message(request, getattr(messages, notice[0].upper()), notice[1])
        return redirect("approvals")
    response = render(
        request,
        "console/approvals.html#approval-list",
        _context(request, notice=notice, notice_for=request_id),
    )
    # The navigation's badge counts the requests still waiting: sent again out of band.
    response.content += render_to_string("console/_nav_approvals.html",
                                         {"here": "approvals", "oob": True}, request).encode()
    return trigger_client_event(response, QUEUE_CHANGED)


def _context(request: HttpRequest, notice=None, notice_for: int | None = None) -> dict:
    requests = fence_of(request.user).apply(
        ApprovalRequest.objects.select_related("job", "attempt", "requested_by", "decided_by")
    )
    pending = list(requests.filter(status=ApprovalStatus.PENDING).order_by("created_at", "id"))
    may_approve = has_role(request.user, [APPROVERS])
    comments = _comments_by_job([item.job_id for item in pending])
    for item in pending:
        item.comments = comments.get(item.job_id, [])
        item.own = item.requested_by_id == request.user.pk
        item.payload_changed = approval_services.payload_digest(item.job.payload) != item.payload_digest
        item.can_decide = may_approve and not item.own
    return {
        "pending": pending,
        "decided": list(requests.exclude(status=ApprovalStatus.PENDING).order_by("-id")[:RECENTLY_DECIDED]),
        # Expired requests apart: nobody decided them, and their jobs went back to the operators.
        "expired": list(requests.filter(status=ApprovalStatus.EXPIRED).order_by("-decided_at", "-id")[:RECENTLY_DECIDED]),
        "may_approve": may_approve,
        "approval_decisions": APPROVAL_DECISIONS,
        "notice": notice,
        "notice_for": notice_for,
    }


def _comments_by_job(job_pks: list[int]) -> dict[int, list[LedgerEvent]]:
    """Each job's comments, oldest first: a colleague's dissent is read before the decision."""
    comments: dict[int, list[LedgerEvent]] = {}
    for event in LedgerEvent.objects.filter(job_id__in=job_pks, kind=EventKind.JOB_COMMENTED).order_by("id"):
        comments.setdefault(event.job_id, []).append(event)
    return comments
