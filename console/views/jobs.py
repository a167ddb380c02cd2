from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import trigger_client_event

from console.access import OPERATORS, READERS, fence_of, has_role, role_required, visible_jobs
from console.forms import DECISION_LABELS, DecisionForm
from console.selectors.job import job_record
from console.views.queue import QUEUE_CHANGED
from ledger.actions import Policy, declared_action
from ledger.gate import gate_status
from ledger.states import FINISHED_JOB
from reconciliation import decisions

# What each button does, shown beside it; irreversible actions say that a replay needs approval.
DECISION_HELP = {
    "confirm_effect": "The effect happened: the job succeeds and is never replayed.",
    "mark_not_found": "Nothing happened: the job is replayed with the same key.",
    "escalate": "Hand the job to someone with more context; nothing automatic happens.",
    "retry_reconciliation": "Ask the provider again now, with a fresh round of checks.",
    "cancel_job": "No more attempts. An unknown attempt stays unknown on record.",
}
IRREVERSIBLE_NOT_FOUND_HELP = (
    "Nothing happened. This action is irreversible: an approver must approve the replay "
    "(four eyes) before anything runs again."
)
# The regions a decision changes: the panel is the target, the others are swapped out of band.
JOB_REGIONS = ("job-summary", "attempts", "approvals", "timeline")


@require_GET
@role_required(*READERS)
def job_detail(request: HttpRequest, job_id: str) -> HttpResponse:
    return render(request, "console/job_detail.html", _context(request, job_id))


@require_POST
@role_required(OPERATORS)
def decide(request: HttpRequest, job_id: str) -> HttpResponse:
    # Outside the user's tenants, the job does not exist: nothing reaches the transition layer.
    get_object_or_404(visible_jobs(request.user).only("id"), job_id=job_id)
    form = DecisionForm(request.POST)
    notice = held = None
    if form.is_valid():
        decision, note = form.cleaned_data["decision"], form.cleaned_data["note"]
        try:
            decisions.decide(
                decision,
                job_id=job_id,
                version=form.cleaned_data["version"],
                user=request.user,
                note=note,
                despite_holder=form.cleaned_data["despite_holder"],
            )
        except decisions.HeldDecision as refused:
            # Nothing changed: ask again, with the note kept and a button that goes ahead.
            notice, held = ("warning", str(refused)), decision
            form = DecisionForm(initial={"note": note})
        except decisions.StaleDecision as stale:
            # The page now shows the job as it is; what they wrote stays, to decide again on it.
            notice, form = ("warning", str(stale)), DecisionForm(initial={"note": note})
        except decisions.DecisionRefused as refused:
            notice, form = ("error", str(refused)), None
        else:
            notice, form = ("success", f"{DECISION_LABELS[decision]}: recorded."), None
    if not request.htmx:
        if notice is None:
            return render(
                request, "console/job_detail.html", _context(request, job_id, form=form), status=400
            )
        if form is not None:  # a note to keep: the page itself, not a redirect that would lose it
            context = _context(request, job_id, form=form, notice=notice, held=held)
            return render(request, "console/job_detail.html", context, status=409)
        messages.add_message(request, getattr(messages, notice[0].upper()), notice[1])
        return redirect("job_detail", job_id=job_id)
    context = _context(request, job_id, form=form, notice=notice, held=held)
    html = render_to_string("console/job_detail.html#decision-panel", context, request)
    if notice is not None:
        context["oob"] = True
        html += "".join(
            render_to_string(f"console/job_detail.html#{r}", context, request) for r in JOB_REGIONS
        )
    return trigger_client_event(HttpResponse(html), QUEUE_CHANGED)


def _context(
    request: HttpRequest, job_id: str, *, form: DecisionForm | None = None, notice=None, held: str | None = None
) -> dict:
    record = job_record(job_id, fence_of(request.user))
    action = declared_action(record.job.action)
    # The policy the job was enqueued with decides; the declaration now is shown when it differs.
    policy = Policy(**record.job.policy) if record.job.policy else action.policy if action else None
    policy_now = action.policy if action and policy and action.policy != policy else None
    allowed = decisions.allowed_decisions(record.job) if record.attempts else []
    help_text = dict(
        DECISION_HELP,
        mark_not_found=DECISION_HELP["mark_not_found"] if policy and policy.reversible else IRREVERSIBLE_NOT_FOUND_HELP,
    )
    return {
        "record": record,
        "job": record.job,
        "action": action,
        "policy": policy,
        "policy_now": policy_now,
        "decisions": [(name, DECISION_LABELS[name], help_text[name]) for name in allowed],
        "form": form or DecisionForm(initial={"version": record.latest.version if record.latest else 1}),
        "version": record.latest.version if record.latest else 1,
        "notice": notice,
        "can_decide": has_role(request.user, [OPERATORS]),
        "gate": gate_status() if record.job.gated_at else None,
        # The decision asked for on a job someone else holds, offered again "anyway".
        "held": (held, DECISION_LABELS[held]) if held else None,
        "holds_it": record.job.holder == request.user.get_username(),
        "finished": FINISHED_JOB,
    }
