from django.contrib import messages
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import trigger_client_event

from console.access import OPERATORS, READERS, TenantFence, fence_of, has_role, role_required
from console.forms import BulkDecisionForm, BulkRunForm, QueueFilterForm
from console.job_ids import is_valid_job_id
from console.selectors.queue import TABS, filtered_jobs, queue_jobs, queue_status_counts, tab_counts
from ledger.services import LedgerError
from reconciliation import decisions
from reconciliation.registry import REGISTRY, bulk_decisions

QUEUE_CHANGED = "queue-changed"
FILTER_FIELDS = ("tab", "status", "action", "tenant", "older_than", "older_than_s", "q", "sort", "size")


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
    return render(
        request, "console/queue.html#queue-counts", _counts_context(form.spec().tab, fence_of(request.user))
    )


@require_POST
@role_required(OPERATORS)
def bulk_decide(request: HttpRequest) -> HttpResponse:
    """One decision with one note for every selected job; each job succeeds or fails alone.

    A job outside the user's tenants is refused exactly as a missing one, before the transition
    layer sees it."""
    every_match = request.POST.get("scope") == "filter"
    form = (BulkRunForm if every_match else BulkDecisionForm)(request.POST)
    results = []
    filters = QueueFilterForm(request.POST)
    if every_match and form.is_valid():
        from console.views.bulk_runs import start  # it imports nothing from here: no cycle

        return start(request, form, filter_params(request.POST).dict())
    if form.is_valid():
        decision = form.cleaned_data["decision"]
        ids = [job_id for job_id, _ in form.selected if is_valid_job_id(job_id)]
        visible = set(fence_of(request.user).jobs().filter(job_id__in=ids).values_list("job_id", flat=True))
        if visible and not form.cleaned_data["confirmed"]:
            # Asked again, by the server, with what it would apply to; nothing changes yet.
            selected = [f"{version}:{job_id}" for job_id, version in form.selected if job_id in visible]
            confirm = {"decision": decision, "label": REGISTRY[decision].label, "note": form.cleaned_data["note"],
                       "evidence": form.cleaned_data["evidence"], "text": REGISTRY[decision].asks_in_bulk,
                       "danger": REGISTRY[decision].danger, "selected": selected, "count": len(selected)}
            template = "console/queue.html#queue-table" if request.htmx else "console/queue.html"
            return render(request, template, _context(request, filters, confirm_bulk=confirm))
        for job_id, version in form.selected:
            if job_id not in visible:
                results.append(("error", f"no job with id {job_id!r}"))
                continue
            try:
                decisions.decide(decision, job_id=job_id, version=version, user=request.user,
                                 note=form.cleaned_data["note"], evidence=form.cleaned_data["evidence"])
            except decisions.StaleDecision as stale:
                results.append(("warning", f"{job_id}: {stale}"))
            except LedgerError as refused:
                results.append(("error", f"{job_id}: {refused}"))
            else:
                results.append(("success", f"{job_id}: {REGISTRY[decision].label} recorded"))
    else:
        results = [("error", error) for errors in form.errors.values() for error in errors]
    if not request.htmx:
        for level, text in results:
            messages.add_message(request, getattr(messages, level.upper()), text)
        return redirect(_queue_url(filter_params(request.POST)))
    response = render(request, "console/queue.html#queue-table", _context(request, filters, results=results))
    return trigger_client_event(response, QUEUE_CHANGED)


def _context(request: HttpRequest, form: QueueFilterForm, results=(), confirm_bulk=None) -> dict:
    spec = form.spec()
    fence = fence_of(request.user)
    page = queue_jobs(spec, fence)
    can_decide = has_role(request.user, [OPERATORS])
    params = filter_params(form.data)
    return {
        **_counts_context(spec.tab, fence),
        "form": form,
        "spec": spec,
        "page": page,
        "filter_query": params.urlencode(),
        # The list a job is opened from travels with its link: "Next job" is this list's next row.
        "list_query": params.urlencode() or f"tab={spec.tab}",
        # The table refreshes the page it shows, cursor included.
        "refresh_url": _queue_url(params, after=spec.after),
        "next_query": _with_cursor(params, page.next_cursor).urlencode() if page.next_cursor else None,
        "results": results,
        "confirm_bulk": confirm_bulk,
        "filter_fields": list(params.items()),
        "filtered": spec.narrowed,
        # What "every job matching" would take: a COUNT bounded by the queue, for operators only.
        "matching": filtered_jobs(spec, fence).count() if can_decide else None,
        "can_decide": can_decide,
        # The decisions this tab offers on many jobs at once (the registry's bulk ones for its statuses).
        "bulk_decisions": bulk_decisions(TABS[spec.tab][1]),
        "bulk_takes_evidence": any(d.takes_evidence for d in bulk_decisions(TABS[spec.tab][1])),
    }


def filter_params(data) -> QueryDict:
    """The queue filters in `data` (GET or a POST that carried them), without the page cursor."""
    params = QueryDict(mutable=True)
    for name in FILTER_FIELDS:
        if data.get(name):
            params[name] = data[name]
    return params


def _with_cursor(params: QueryDict, after: str) -> QueryDict:
    params = params.copy()
    if after:
        params["after"] = after
    return params


def _queue_url(params: QueryDict, *, after: str = "") -> str:
    query = _with_cursor(params, after).urlencode()
    return reverse("queue") + (f"?{query}" if query else "")


def _counts_context(current_tab: str, fence: TenantFence) -> dict:
    counts = queue_status_counts(fence)
    per_tab = tab_counts(counts)
    return {
        "counts": counts,
        "tabs": [(key, label, per_tab[key]) for key, (label, _) in TABS.items()],
        "current_tab": current_tab,
    }
