from django.contrib import messages
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import trigger_client_event

from console.access import OPERATORS, READERS, has_role, role_required
from console.forms import DECISION_LABELS, BulkDecisionForm, QueueFilterForm
from console.selectors.queue import TABS, queue_jobs, tab_counts, unknown_work_counts
from ledger.services import LedgerError
from reconciliation import decisions

QUEUE_CHANGED = "queue-changed"
FILTER_FIELDS = ("tab", "status", "action", "tenant", "older_than", "q", "sort", "size")


@require_GET
@role_required(*READERS)
def queue(request: HttpRequest) -> HttpResponse:
    form = QueueFilterForm(request.GET)
    template = "console/queue.html#queue-table" if request.htmx else "console/queue.html"
    return render(request, template, _context(request, form))


@require_GET
@role_required(*READERS)
def queue_counts(request: HttpRequest) -> HttpResponse:
    form = QueueFilterForm(request.GET)
    return render(request, "console/queue.html#queue-counts", _counts_context(form.spec().tab))


@require_POST
@role_required(OPERATORS)
def bulk_decide(request: HttpRequest) -> HttpResponse:
    """One decision with one note for every selected job; each job succeeds or fails alone."""
    form = BulkDecisionForm(request.POST)
    results = []
    if form.is_valid():
        decision = form.cleaned_data["decision"]
        for job_id, version in form.selected:
            try:
                decisions.decide(decision, job_id=job_id, version=version, user=request.user,
                                 note=form.cleaned_data["note"])
            except decisions.StaleDecision as stale:
                results.append(("warning", f"{job_id}: {stale}"))
            except LedgerError as refused:
                results.append(("error", f"{job_id}: {refused}"))
            else:
                results.append(("success", f"{job_id}: {DECISION_LABELS[decision]} recorded"))
    else:
        results = [("error", error) for errors in form.errors.values() for error in errors]
    filters = QueueFilterForm(request.POST)
    if not request.htmx:
        for level, text in results:
            messages.add_message(request, getattr(messages, level.upper()), text)
        query = _filter_params(request.POST).urlencode()
        return redirect(reverse("queue") + (f"?{query}" if query else ""))
    response = render(request, "console/queue.html#queue-table", _context(request, filters, results=results))
    return trigger_client_event(response, QUEUE_CHANGED)


def _context(request: HttpRequest, form: QueueFilterForm, results=()) -> dict:
    spec = form.spec()
    page = queue_jobs(spec)
    params = _filter_params(form.data)
    next_query = None
    if page.next_cursor:
        params["after"] = page.next_cursor
        next_query = params.urlencode()
        del params["after"]
    return {
        **_counts_context(spec.tab),
        "form": form,
        "spec": spec,
        "page": page,
        "filter_query": params.urlencode(),
        "refresh_url": reverse("queue")
        + "?"
        + params.urlencode()
        + (f"&after={spec.after}" if spec.after else ""),
        "next_query": next_query,
        "results": results,
        "can_decide": has_role(request.user, [OPERATORS]),
    }


def _filter_params(data) -> QueryDict:
    """The queue filters in `data` (GET or a POST that carried them), without the page cursor."""
    params = QueryDict(mutable=True)
    for name in FILTER_FIELDS:
        if data.get(name):
            params[name] = data[name]
    return params


def _counts_context(current_tab: str) -> dict:
    counts = unknown_work_counts()
    per_tab = tab_counts(counts)
    return {
        "counts": counts,
        "tabs": [(key, label, per_tab[key]) for key, (label, _) in TABS.items()],
        "current_tab": current_tab,
    }
