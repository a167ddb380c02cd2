from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.views.decorators.http import require_POST

from console.access import APPROVERS, OPERATORS, has_role, role_required, visible_jobs
from console.views.jobs import _context, job_url
from ledger.services import CommentRefused, comment_on_job
from ledger.states import ActorType


@require_POST
@role_required(OPERATORS, APPROVERS)
def comment(request: HttpRequest, job_id: str) -> HttpResponse:
    """A comment on the job, into its history. Refused (empty, too long): the text stays in the form."""
    # Outside the user's tenants, the job does not exist: nothing reaches the transition layer.
    get_object_or_404(visible_jobs(request.user).only("id"), job_id=job_id)
    text = request.POST.get("comment", "")
    actor_type = ActorType.OPERATOR if has_role(request.user, [OPERATORS]) else ActorType.APPROVER
    try:
        event = comment_on_job(job_id=job_id, author=request.user.get_username(), actor_type=actor_type, text=text)
    except CommentRefused as refused:
        comment_state = {"comment_notice": ("error", f"Not added: {refused}. Nothing was written."), "comment_text": text}
        if not request.htmx:
            return render(request, "console/job_detail.html", {**_context(request, job_id), **comment_state},
                          status=400)
        return render(request, "console/job_detail.html#comment-form", {**_context(request, job_id), **comment_state})
    if not request.htmx:
        return redirect(job_url(job_id, request.GET) + f"#event-{event.pk}")
    context = {**_context(request, job_id), "comment_notice": ("success", "Comment added to the job's history."),
               "oob": True}
    html = render_to_string("console/job_detail.html#comment-form", context, request)
    html += render_to_string("console/job_detail.html#timeline", context, request)
    return HttpResponse(html)
