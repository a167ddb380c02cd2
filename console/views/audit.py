import csv
import json

from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from console.access import READERS, role_required
from console.forms import AuditFilterForm
from console.selectors.audit import audit_events, audit_page
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
KNOWN_KINDS = tuple(EventKind)


@require_GET
@role_required(*READERS)
def audit(request: HttpRequest) -> HttpResponse:
    form = AuditFilterForm(request.GET)
    page = audit_page(form.spec())
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
        },
    )


class _Echo:
    """A file-like object whose write() hands the line back, for csv.writer in a stream."""

    def write(self, value: str) -> str:
        return value


@require_GET
@role_required(*READERS)
def audit_export(request: HttpRequest) -> StreamingHttpResponse:
    events = audit_events(AuditFilterForm(request.GET).spec())
    writer = csv.writer(_Echo())

    def rows():
        yield writer.writerow(CSV_COLUMNS)
        for event in events.iterator(chunk_size=2000):
            yield writer.writerow(
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
            )

    response = StreamingHttpResponse(rows(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = 'attachment; filename="reckon-audit.csv"'
    return response
