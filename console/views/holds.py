"""Who is on a job: "I'm on it", take over, release. From the job page's decision panel."""

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.template.loader import render_to_string
from django.utils import timezone
from django.views.decorators.http import require_POST
from django_htmx.http import trigger_client_event

from console.access import OPERATORS, role_required, visible_jobs
from console.forms import HoldForm
from console.views.jobs import _context as job_page_context  # the panel shows what the job page shows
from console.views.queue import QUEUE_CHANGED
from ledger.services import HeldByAnother, LedgerError, release_job, take_job
from reconciliation.decisions import when


@require_POST
@role_required(OPERATORS)
def hold(request: HttpRequest, job_id: str) -> HttpResponse:
    # Outside the user's tenants, the job does not exist: nothing reaches the transition layer.
    get_object_or_404(visible_jobs(request.user).only("id"), job_id=job_id)
    form = HoldForm(request.POST)
    me = request.user.get_username()
    if not form.is_valid():
        notice = ("error", "Say whether you take the job or release it.")
    else:
        try:
            if form.cleaned_data["hold"] == "release":
                release_job(job_id=job_id, actor=me)
                notice = ("success", "Released: nobody is on this job now.")
            else:
                take_job(job_id=job_id, holder=me, take_over=form.cleaned_data["hold"] == "take_over")
                notice = ("success", "You are on this job: colleagues see it in the queue.")
        except HeldByAnother as held:
            notice = ("warning", f"{held.holder} has been on this job since {when(held.held_since, timezone.now())}: "
                                 "take it over if they agree, or leave it to them.")
        except LedgerError as refused:
            notice = ("error", str(refused))
    if not request.htmx:
        messages.add_message(request, getattr(messages, notice[0].upper()), notice[1])
        return redirect("job_detail", job_id=job_id)
    html = render_to_string("console/job_detail.html#decision-panel", job_page_context(request, job_id, notice=notice), request)
    return trigger_client_event(HttpResponse(html), QUEUE_CHANGED)
