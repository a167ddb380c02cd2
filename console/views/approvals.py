from django.contrib import messages
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import trigger_client_event

from approvals import services as approval_services
from approvals.models import ApprovalRequest, ApprovalStatus
from console.access import APPROVERS, READERS, fence_of, has_role, role_required
from console.bulk_approvals import decide_requests
from console.forms import ApprovalDecisionForm, ApprovalFilterForm, BulkApprovalForm
from console.selectors.approvals import is_first_call, pending_actions, pending_requests
from console.views.queue import QUEUE_CHANGED
from reconciliation.registry import APPROVAL_DECISIONS, REGISTRY

RECENTLY_DECIDED = 20


@require_GET
@role_required(*READERS)
def approvals(request: HttpRequest) -> HttpResponse:
    return render(request, "console/approvals.html", _context(request, request.GET))


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
            notice = ("success", f"{_title(approval)} {REGISTRY[decision].done}.")
    else:
        notice = ("error", "; ".join(e for errors in form.errors.values() for e in errors))
    return _answer(request, _context(request, request.POST, notice=notice, notice_for=request_id))


@require_POST
@role_required(APPROVERS)
def bulk_decide(request: HttpRequest) -> HttpResponse:
    """One decision and one note for the selected requests (or every one the filter matches),
    each decided on its own (console.bulk_approvals); asked first, with the count."""
    form = BulkApprovalForm(request.POST)
    fence = fence_of(request.user)
    if not form.is_valid():
        notice = ("error", "; ".join(e for errors in form.errors.values() for e in errors))
        return _answer(request, _context(request, request.POST, notice=notice))
    ids = form.selected
    if form.cleaned_data["scope"] == "filter" and not form.cleaned_data["confirmed"]:
        # What the filter matches now is what is asked about, and then decided: these ids.
        ids = [item.pk for item in pending_requests(_spec(request.POST, fence), fence, request.user)]
    if not ids:
        return _answer(request, _context(request, request.POST, notice=("error", "Select at least one request.")))
    decision = REGISTRY[form.cleaned_data["decision"]]
    if not form.cleaned_data["confirmed"]:
        confirm = {"decision": decision.name, "label": decision.label, "danger": decision.danger,
                   "note": form.cleaned_data["note"], "selected": ids, "count": len(ids)}
        return _answer(request, _context(request, request.POST, confirm=confirm), changed=False)
    outcomes = decide_requests(decision.name, request_ids=ids, user=request.user, note=form.cleaned_data["note"],
                               fence=fence)
    done = sum(o.level == "success" for o in outcomes)
    notice = ("success" if done == len(outcomes) else "warning",
              f"{decision.label}: {done} recorded, {len(outcomes) - done} refused, each on its own.")
    return _answer(request, _context(request, request.POST, notice=notice, outcomes=outcomes))


def _answer(request: HttpRequest, context: dict, *, changed: bool = True) -> HttpResponse:
    if not request.htmx:
        if context.get("confirm"):  # the question itself, not a redirect that would lose it
            return render(request, "console/approvals.html", context)
        if context["notice"]:
            messages.add_message(request, getattr(messages, context["notice"][0].upper()), context["notice"][1])
        for outcome in context.get("outcomes") or ():
            messages.add_message(request, getattr(messages, outcome.level.upper()),
                                 f"Request #{outcome.request_id} ({outcome.job_id}): {outcome.text}")
        return redirect(_approvals_url(context["filter_params"]))
    response = render(request, "console/approvals.html#approval-list", context)
    if not changed:
        return response
    # The navigation's badge counts the requests still waiting: sent again out of band.
    response.content += render_to_string("console/_nav_approvals.html",
                                         {"here": "approvals", "oob": True}, request).encode()
    return trigger_client_event(response, QUEUE_CHANGED)


def _spec(data, fence):
    return ApprovalFilterForm(data, actions=pending_actions(fence)).spec()


def _filter_params(data) -> QueryDict:
    params = QueryDict(mutable=True)
    for name in ApprovalFilterForm.FIELDS:
        if data.get(name):
            params[name] = data[name]
    return params


def _approvals_url(params: QueryDict) -> str:
    query = params.urlencode()
    return reverse("approvals") + (f"?{query}" if query else "")


def _title(approval: ApprovalRequest) -> str:
    return f"First call of {approval.job.job_id}" if is_first_call(approval) else f"Replay of {approval.job.job_id}"


def _context(request: HttpRequest, data, notice=None, notice_for: int | None = None, confirm=None,
             outcomes=None) -> dict:
    fence = fence_of(request.user)
    requests = fence.apply(
        ApprovalRequest.objects.select_related("job", "attempt", "requested_by", "decided_by")
    )
    form = ApprovalFilterForm(data, actions=pending_actions(fence))
    spec = form.spec()
    pending = pending_requests(spec, fence, request.user)
    may_approve = has_role(request.user, [APPROVERS])
    for item in pending:
        item.can_decide = may_approve and not item.own
    params = _filter_params(data)
    return {
        "pending": pending,
        "filter_form": form,
        "spec": spec,
        "filter_params": params,
        "filter_fields": list(params.items()),
        "filter_url": _approvals_url(params),
        "all_pending": requests.filter(status=ApprovalStatus.PENDING).count() if spec.narrowed else len(pending),
        "decided": list(requests.exclude(status=ApprovalStatus.PENDING).order_by("-id")[:RECENTLY_DECIDED]),
        # Expired requests apart: nobody decided them, and their jobs went back to the operators.
        "expired": list(requests.filter(status=ApprovalStatus.EXPIRED).order_by("-decided_at", "-id")[:RECENTLY_DECIDED]),
        "may_approve": may_approve,
        "approval_decisions": APPROVAL_DECISIONS,
        "notice": notice,
        "notice_for": notice_for,
        "confirm": confirm,
        "outcomes": outcomes,
    }
