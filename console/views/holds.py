"""Who is on a job: "I'm on it", take over, release. From the job page's decision panel; taking
over and releasing a colleague's hold ask first."""

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.utils import timezone
from django.views.decorators.http import require_POST
from django_htmx.http import trigger_client_event

from console.access import OPERATORS, role_required, visible_jobs
from console.forms import HoldForm
from console.views.jobs import _context as job_page_context  # the panel shows what the job page shows
from console.views.jobs import job_url
from console.views.queue import QUEUE_CHANGED
from ledger.moments import when
from ledger.services import HeldByAnother, LedgerError, release_job, take_job


@require_POST
@role_required(OPERATORS)
def hold(request: HttpRequest, job_id: str) -> HttpResponse:
    # Outside the user's tenants, the job does not exist: nothing reaches the transition layer.
    get_object_or_404(visible_jobs(request.user).only("id"), job_id=job_id)
    form = HoldForm(request.POST)
    me = request.user.get_username()
    confirm_release = None
    if not form.is_valid():
        notice = ("error", "Say whether you take the job or release it.")
    else:
        choice = form.cleaned_data["hold"]
        try:
            if choice in ("release", "release_other"):
                release_job(job_id=job_id, actor=me, release_other=choice == "release_other")
                notice = ("success", "Released: nobody is on this job now.")
            else:
                take_job(job_id=job_id, holder=me, take_over=choice == "take_over", note=form.cleaned_data["reason"])
                notice = ("success", "You are on this job: colleagues see it in the queue"
                                     + (", with what you are doing." if form.cleaned_data["reason"] else "."))
        except HeldByAnother as held:
            since = when(held.held_since, timezone.now())
            if choice == "release":  # a colleague's hold: asked first, as taking over is
                confirm_release = held.holder
                notice = ("warning", f"{held.holder} has been on this job since {since}: release their hold "
                                     "only if they agree (or they have gone).")
            else:
                notice = ("warning", f"{held.holder} has been on this job since {since}: "
                                     "take it over if they agree, or leave it to them.")
        except LedgerError as refused:
            notice = ("error", str(refused))
    if not request.htmx and not confirm_release:
        messages.add_message(request, getattr(messages, notice[0].upper()), notice[1])
        return redirect(job_url(job_id, request.GET))
    context = {**job_page_context(request, job_id, notice=notice), "confirm_release": confirm_release}
    if not request.htmx:  # the question itself, not a redirect that would lose it
        return render(request, "console/job_detail.html", {**context, "messages": []})
    html = render_to_string("console/job_detail.html#decision-panel", context, request)
    response = HttpResponse(html)
    return response if confirm_release else trigger_client_event(response, QUEUE_CHANGED)
