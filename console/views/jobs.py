from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import trigger_client_event

from console.access import APPROVERS, OPERATORS, READERS, fence_of, has_role, role_required, visible_jobs
from console.forms import DecisionForm, QueueFilterForm
from console.selectors.history import archived_job
from console.selectors.job import job_record, mcp_call
from console.selectors.queue import next_in_list, nothing_to_do_for, queue_tab_of
from console.views.queue import QUEUE_CHANGED, filter_params
from ledger.actions import Policy, declared_action
from ledger.gate import gate_status
from ledger.states import FINISHED_JOB
from reconciliation import decisions
from reconciliation.registry import REGISTRY

# The regions a decision changes: the panel is the target, the others are swapped out of band.
JOB_REGIONS = ("job-summary", "attempts", "approvals", "timeline")


@require_GET
@role_required(*READERS)
def job_detail(request: HttpRequest, job_id: str) -> HttpResponse:
    # After a decision without JavaScript, its result is shown (and focused) in the decision panel,
    # not in the page's message list.
    stored = list(messages.get_messages(request))
    notice = (stored[-1].level_tag, str(stored[-1])) if stored else None
    try:
        context = _context(request, job_id, notice=notice)
    except Http404:
        # Only a job that is not online is looked up among the archived ones (no query more for the
        # page of a job that is): its history left the database, the page says when and where to.
        tombstone = archived_job(job_id, fence_of(request.user))
        if tombstone is None:
            raise
        return render(request, "console/job_archived.html", {"tombstone": tombstone})
    return render(request, "console/job_detail.html", {**context, "messages": []})


@require_POST
@role_required(OPERATORS)
def decide(request: HttpRequest, job_id: str) -> HttpResponse:
    # Outside the user's tenants, the job does not exist: nothing reaches the transition layer.
    get_object_or_404(visible_jobs(request.user).only("id"), job_id=job_id)
    form = DecisionForm(request.POST)
    notice = confirm = held = None
    if form.is_valid():
        decision = REGISTRY[form.cleaned_data["decision"]]
        if not has_role(request.user, [decision.role]):  # who may take it: the registry says
            raise PermissionDenied(f"{decision.label} is for {decision.role}")
        if decision.confirm and not form.cleaned_data["confirmed"]:
            # The first submit only asks: the second, explicit one decides.
            confirm = {"decision": decision.name, "label": decision.label, "text": decision.confirm,
                       "note": form.cleaned_data["note"], "version": form.cleaned_data["version"],
                       "despite_holder": form.cleaned_data["despite_holder"]}
        else:
            notice, form, held = _apply(decision.name, job_id, form.cleaned_data, request.user)
    if not request.htmx:
        if notice is None:
            return render(request, "console/job_detail.html",
                          _context(request, job_id, form=form, confirm=confirm), status=200 if confirm else 400)
        if form is not None:  # a note to keep: the page itself, not a redirect that would lose it
            context = _context(request, job_id, form=form, notice=notice, held=held)
            return render(request, "console/job_detail.html", context, status=409)
        messages.add_message(request, getattr(messages, notice[0].upper()), notice[1])
        return redirect(job_url(job_id, request.GET))
    context = _context(request, job_id, form=form, notice=notice, confirm=confirm, held=held)
    html = render_to_string("console/job_detail.html#decision-panel", context, request)
    if notice is not None:
        context["oob"] = True
        html += "".join(
            render_to_string(f"console/job_detail.html#{r}", context, request) for r in JOB_REGIONS
        )
    response = HttpResponse(html)
    return trigger_client_event(response, QUEUE_CHANGED) if notice is not None else response


def _apply(decision: str, job_id: str, data: dict, user) -> tuple[tuple[str, str], DecisionForm | None, str | None]:
    """The decision through the transition layer: what to tell the operator, the form to show
    again (their note kept) when the decision was not applied, and a decision held back because
    someone else is on the job."""
    note, payload = data["note"], data["payload"]
    kept = DecisionForm(initial={"note": note, "payload": payload})
    try:
        decisions.decide(decision, job_id=job_id, version=data["version"], user=user, note=note,
                         despite_holder=data["despite_holder"], payload=payload)
    except decisions.HeldDecision as refused:
        # Nothing changed: ask again, with the note kept and a button that goes ahead.
        return ("warning", str(refused)), kept, decision
    except decisions.StaleDecision as stale:
        # The page now shows the job as it is; what they wrote stays, to decide again on it.
        return ("warning", str(stale)), kept, None
    except decisions.DecisionRefused as refused:
        # A corrected payload that was refused is kept, to fix it rather than type it again.
        return ("error", f"{refused} Nothing changed."), kept if payload else None, None
    return ("success", f"{REGISTRY[decision].label}: recorded."), None, None


def came_from_list(request: HttpRequest, job) -> dict:
    """The queue list in the page's query (the queue's links carry it), or the job's own tab."""
    params = filter_params(request.GET)
    if not params:
        params["tab"] = queue_tab_of(job)
    return {"spec": QueueFilterForm(params).spec(), "query": params.urlencode()}


def job_url(job_id: str, query) -> str:
    """The job's page, with the list it was opened from (`query`: the queue's filter fields)."""
    params = filter_params(query)
    return reverse("job_detail", args=[job_id]) + (f"?{params.urlencode()}" if params else "")


def _context(request: HttpRequest, job_id: str, *, form: DecisionForm | None = None, notice=None,
             confirm=None, held: str | None = None) -> dict:
    fence = fence_of(request.user)
    record = job_record(job_id, fence)
    action = declared_action(record.job.action)
    # The policy the job was enqueued with decides; the declaration now is shown when it differs.
    policy = Policy(**record.job.policy) if record.job.policy else action.policy if action else None
    policy_now = action.policy if action and policy and action.policy != policy else None
    came_from = came_from_list(request, record.job)
    allowed = [REGISTRY[name] for name in decisions.allowed_decisions(record.job, record.latest)] if record.attempts else []
    reversible = bool(policy and policy.reversible)
    return {
        "record": record,
        "job": record.job,
        "mcp": mcp_call(record),
        "action": action,
        "policy": policy,
        "policy_now": policy_now,
        # Each open decision with its help as it applies to this job's action.
        "decisions": [(decision, decision.help_for(reversible=reversible)) for decision in allowed],
        "takes_payload": any(decision.takes_payload for decision in allowed),
        "confirm": confirm,
        "triage": record.triage,
        # The list the person came from (its tab, filters, order): "Next job" is its next row.
        "next_job": next_in_list(record.job, came_from["spec"], fence, nothing_to_do=nothing_to_do_for(
            operates=has_role(request.user, [OPERATORS]), approves=has_role(request.user, [APPROVERS]))),
        "list_query": came_from["query"],
        "queue_url": reverse("queue") + f"?{came_from['query']}",
        "form": form or DecisionForm(initial={"version": record.latest.version if record.latest else 1}),
        "version": record.latest.version if record.latest else 1,
        "notice": notice,
        "can_decide": has_role(request.user, [OPERATORS]),
        "can_comment": has_role(request.user, [OPERATORS, APPROVERS]),
        "gate": gate_status() if record.job.gated_at else None,
        # The decision asked for on a job someone else holds, offered again "anyway".
        "held": (held, REGISTRY[held].label) if held else None,
        "holds_it": record.job.holder == request.user.get_username(),
        "finished": FINISHED_JOB,
    }
