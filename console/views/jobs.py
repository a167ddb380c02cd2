from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import trigger_client_event

from console.access import APPROVERS, OPERATORS, READERS, fence_of, has_role, role_required, visible_jobs
from console.forms import DECISION_LABELS, DecisionForm
from console.selectors.job import job_record, mcp_call
from console.selectors.queue import next_in_queue, queue_tab_of
from console.views.queue import QUEUE_CHANGED
from ledger.actions import Policy, declared_action
from ledger.gate import gate_status
from ledger.states import FINISHED_JOB
from reconciliation import decisions

# What each button does, shown beside it; irreversible actions say that a replay needs approval.
DECISION_HELP = {
    "recheck_identity": "Run the identity check again now; the job stays blocked and records what it saw.",
    "replay_blocked": "The binding matches now and nothing was sent: run it again with the same key.",
    "confirm_effect": "The effect happened: the job succeeds and is never replayed.",
    "mark_not_found": "Nothing happened: the job is replayed with the same key.",
    "escalate": "Hand the job to someone with more context; nothing automatic happens.",
    "retry_reconciliation": "Ask the provider again now, with a fresh round of checks.",
    "request_approval": "The attempt did nothing; a second person approves the replay (a new request).",
    "cancel_job": "No more attempts. An unknown attempt stays unknown on record.",
}
IRREVERSIBLE_NOT_FOUND_HELP = (
    "Nothing happened. This action is irreversible: an approver must approve the replay "
    "(four eyes) before anything runs again."
)
# One key per decision (pressed outside a text field; listed under "?"): see static/js/console.js.
DECISION_KEYS = {
    "recheck_identity": "i",
    "replay_blocked": "p",
    "confirm_effect": "c",
    "mark_not_found": "n",
    "escalate": "e",
    "retry_reconciliation": "r",
    "request_approval": "a",
    "cancel_job": "x",
}
# What the second step of a destructive decision says will happen.
CONFIRM_TEXT = {
    "cancel_job": "No more attempts will run for this job, and it leaves the queue for good.",
}
# The regions a decision changes: the panel is the target, the others are swapped out of band.
JOB_REGIONS = ("job-summary", "attempts", "approvals", "timeline")


@require_GET
@role_required(*READERS)
def job_detail(request: HttpRequest, job_id: str) -> HttpResponse:
    # After a decision without JavaScript, its result is shown (and focused) in the decision panel,
    # not in the page's message list.
    stored = list(messages.get_messages(request))
    notice = (stored[-1].level_tag, str(stored[-1])) if stored else None
    return render(request, "console/job_detail.html", {**_context(request, job_id, notice=notice), "messages": []})


@require_POST
@role_required(OPERATORS)
def decide(request: HttpRequest, job_id: str) -> HttpResponse:
    # Outside the user's tenants, the job does not exist: nothing reaches the transition layer.
    get_object_or_404(visible_jobs(request.user).only("id"), job_id=job_id)
    form = DecisionForm(request.POST)
    notice = confirm = held = None
    if form.is_valid():
        decision = form.cleaned_data["decision"]
        if decision in decisions.DESTRUCTIVE and not form.cleaned_data["confirmed"]:
            # The first submit only asks: the second, explicit one decides.
            confirm = {"decision": decision, "label": DECISION_LABELS[decision], "text": CONFIRM_TEXT[decision],
                       "note": form.cleaned_data["note"], "version": form.cleaned_data["version"],
                       "despite_holder": form.cleaned_data["despite_holder"]}
        else:
            notice, form, held = _apply(decision, job_id, form.cleaned_data, request.user)
    if not request.htmx:
        if notice is None:
            return render(request, "console/job_detail.html",
                          _context(request, job_id, form=form, confirm=confirm), status=200 if confirm else 400)
        if form is not None:  # a note to keep: the page itself, not a redirect that would lose it
            context = _context(request, job_id, form=form, notice=notice, held=held)
            return render(request, "console/job_detail.html", context, status=409)
        messages.add_message(request, getattr(messages, notice[0].upper()), notice[1])
        return redirect("job_detail", job_id=job_id)
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
    note = data["note"]
    try:
        decisions.decide(decision, job_id=job_id, version=data["version"], user=user, note=note,
                         despite_holder=data["despite_holder"])
    except decisions.HeldDecision as refused:
        # Nothing changed: ask again, with the note kept and a button that goes ahead.
        return ("warning", str(refused)), DecisionForm(initial={"note": note}), decision
    except decisions.StaleDecision as stale:
        # The page now shows the job as it is; what they wrote stays, to decide again on it.
        return ("warning", str(stale)), DecisionForm(initial={"note": note}), None
    except decisions.DecisionRefused as refused:
        return ("error", f"{refused} Nothing changed."), None, None
    return ("success", f"{DECISION_LABELS[decision]}: recorded."), None, None


def _context(request: HttpRequest, job_id: str, *, form: DecisionForm | None = None, notice=None,
             confirm=None, held: str | None = None) -> dict:
    fence = fence_of(request.user)
    record = job_record(job_id, fence)
    action = declared_action(record.job.action)
    # The policy the job was enqueued with decides; the declaration now is shown when it differs.
    policy = Policy(**record.job.policy) if record.job.policy else action.policy if action else None
    policy_now = action.policy if action and policy and action.policy != policy else None
    allowed = decisions.allowed_decisions(record.job, record.latest) if record.attempts else []
    help_text = dict(
        DECISION_HELP,
        mark_not_found=DECISION_HELP["mark_not_found"] if policy and policy.reversible else IRREVERSIBLE_NOT_FOUND_HELP,
    )
    return {
        "record": record,
        "job": record.job,
        "mcp": mcp_call(record),
        "action": action,
        "policy": policy,
        "policy_now": policy_now,
        "decisions": [(name, DECISION_LABELS[name], help_text[name], DECISION_KEYS[name]) for name in allowed],
        "confirm": confirm,
        "triage": record.triage,
        "next_job": next_in_queue(record.job, fence),
        "queue_tab": queue_tab_of(record.job),
        "form": form or DecisionForm(initial={"version": record.latest.version if record.latest else 1}),
        "version": record.latest.version if record.latest else 1,
        "notice": notice,
        "can_decide": has_role(request.user, [OPERATORS]),
        "can_comment": has_role(request.user, [OPERATORS, APPROVERS]),
        "gate": gate_status() if record.job.gated_at else None,
        # The decision asked for on a job someone else holds, offered again "anyway".
        "held": (held, DECISION_LABELS[held]) if held else None,
        "holds_it": record.job.holder == request.user.get_username(),
        "finished": FINISHED_JOB,
    }
