import json

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from console.access import READERS, fence_of, role_required
from console.csv_export import csv_download
from console.forms import AuditFilterForm
from console.selectors.audit import AUDIT_JOBS, admin_changes, audit_events, audit_page, found_jobs, sign_ins
from console.selectors.history import history_periods
from ledger.states import EventKind

CSV_COLUMNS = (
    "id",
    "at",
    "job_id",
    "attempt",
    "actor_type",
    "actor",
    "kind",
    "before",
    "after",
    "note",
    "evidence",
    "prev_hash",
    "hash",
)
ADMIN_CSV_COLUMNS = ("id", "at", "actor", "action", "object_type", "object_pk", "object", "changes")
KNOWN_KINDS = tuple(EventKind)
# The page shows the latest changes to people; the CSV has all of them.
ADMIN_CHANGES_SHOWN = 50


@require_GET
@role_required(*READERS)
def audit(request: HttpRequest) -> HttpResponse:
    form = AuditFilterForm(request.GET)
    spec = form.spec()
    fence = fence_of(request.user)
    found = found_jobs(spec, fence)
    page = audit_page(spec, fence, found)
    params = request.GET.copy()
    params.pop("before", None)
    next_query = None
    if page.next_cursor:
        params["before"] = page.next_cursor
        next_query = params.urlencode()
        del params["before"]
    template = "console/audit.html#audit-table" if request.htmx else "console/audit.html"
    return render(
        request,
        template,
        {
            "form": form,
            "page": page,
            "next_query": next_query,
            "filter_query": params.urlencode(),
            "known_kinds": KNOWN_KINDS,
            "found_jobs": None if found is None else min(len(found), AUDIT_JOBS),
            "more_jobs": found is not None and len(found) > AUDIT_JOBS,
            # People and permissions span every tenant: only a user who sees every tenant sees them.
            "admin_changes": list(admin_changes(spec)[:ADMIN_CHANGES_SHOWN]) if fence.everything else None,
            "sign_ins": list(sign_ins(spec)[:ADMIN_CHANGES_SHOWN]) if fence.everything else None,
            "history": None if request.htmx else history_periods(),
        },
    )


@require_GET
@role_required(*READERS)
def audit_export(request: HttpRequest) -> StreamingHttpResponse:
    events = audit_events(AuditFilterForm(request.GET).spec(), fence_of(request.user))
    rows = (
        [
            event.pk,
            event.at.isoformat(),
            event.job.job_id,
            event.attempt.number if event.attempt else "",
            event.actor_type,
            event.actor,
            event.kind,
            json.dumps(event.before, sort_keys=True),
            json.dumps(event.after, sort_keys=True),
            event.note,
            json.dumps(event.evidence, sort_keys=True),
            event.prev_hash,
            event.hash,
        ]
        for event in events.iterator(chunk_size=2000)
    )
    return csv_download("reckon-audit.csv", CSV_COLUMNS, rows)


@require_GET
@role_required(*READERS)
def admin_audit_export(request: HttpRequest) -> StreamingHttpResponse:
    if not fence_of(request.user).everything:
        raise PermissionDenied("changes to people span every tenant: this needs a scope of all tenants")
    entries = admin_changes(AuditFilterForm(request.GET).spec())
    rows = (
        [
            entry.pk,
            entry.at.isoformat(),
            entry.actor,
            entry.action,
            entry.object_type,
            entry.object_pk,
            entry.object_repr,
            json.dumps(entry.changes, sort_keys=True),
        ]
        for entry in entries.iterator(chunk_size=2000)
    )
    return csv_download("reckon-admin-audit.csv", ADMIN_CSV_COLUMNS, rows)
