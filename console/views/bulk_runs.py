"""Bulk decisions on every job a queue filter matches: confirm, then watch it run batch by batch
(`console.bulk_runs` says why batches driven by the page)."""

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.http import urlencode
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import HttpResponseClientRedirect, trigger_client_event

from console import bulk_runs
from console.access import OPERATORS, role_required
from console.forms import BulkRunForm, QueueFilterForm
from console.models import BulkRun
from reconciliation.registry import REGISTRY

QUEUE_CHANGED = "queue-changed"  # console.views.queue's event (that module routes here)


def start(request: HttpRequest, form: BulkRunForm, filters: dict) -> HttpResponse:
    """From the queue's bulk form with "every job matching" ticked (`form` is valid). A decision
    that asks first (the registry's `confirm`: cancel, close) asks on the page; once confirmed (or
    for one that takes nothing back, a retry) the run starts and the browser goes to its page."""
    decision, note = REGISTRY[form.cleaned_data["decision"]], form.cleaned_data["note"]
    evidence = form.cleaned_data["evidence"]
    if decision.asks_in_bulk and not form.cleaned_data["confirmed"]:
        spec = QueueFilterForm(filters).spec()
        context = {"decision": decision.name, "label": decision.label, "confirm_text": decision.asks_in_bulk,
                   "note": note, "evidence": evidence, "filters": filters, "danger": decision.danger,
                   "matching": bulk_runs.matching(spec, request.user).count(),
                   "queue_url": _queue_url(filters)}
        template = "console/bulk_run.html#bulk-confirm" if request.htmx else "console/bulk_run.html"
        return render(request, template, context)
    run = bulk_runs.start_run(user=request.user, decision=decision.name, note=note, filters=filters,
                              evidence=evidence)
    url = reverse("bulk_run", args=[run.pk])
    return HttpResponseClientRedirect(url) if request.htmx else redirect(url)


@require_GET
@role_required(OPERATORS)
def bulk_run(request: HttpRequest, run_id: int) -> HttpResponse:
    return render(request, "console/bulk_run.html", _context(_own_run(request, run_id)))


@require_POST
@role_required(OPERATORS)
def bulk_run_step(request: HttpRequest, run_id: int) -> HttpResponse:
    run = bulk_runs.step_run(_own_run(request, run_id).pk)
    if not request.htmx:
        return redirect("bulk_run", run_id=run.pk)
    response = render(request, "console/bulk_run.html#run-progress", _context(run))
    return trigger_client_event(response, QUEUE_CHANGED)


def _own_run(request: HttpRequest, run_id: int) -> BulkRun:
    """A run is its author's: anyone else gets what a missing run gets."""
    return get_object_or_404(BulkRun, pk=run_id, user=request.user)


def _context(run: BulkRun) -> dict:
    return {"run": run, "label": REGISTRY[run.decision].label, "filters": run.filters,
            "queue_url": _queue_url(run.filters),
            "percent": round(100 * run.done / run.total) if run.total else 100}


def _queue_url(filters: dict) -> str:
    return reverse("queue") + (f"?{urlencode(filters)}" if filters else "")
