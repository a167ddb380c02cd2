from django.contrib.auth.decorators import login_required
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from ledger.models import Job
from ledger.states import JobStatus


@require_GET
@login_required
def overview(request: HttpRequest) -> HttpResponse:
    counts = Job.objects.counts_by_status()
    rows = [(status.label, status.value, counts.get(status.value, 0)) for status in JobStatus]
    return render(request, "console/overview.html", {"rows": rows, "total": sum(counts.values())})


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness and database reachability; no login, no details an outsider could use."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return JsonResponse({"ok": True, "database": "ok"})
    except Exception:
        return JsonResponse({"ok": False, "database": "unreachable"}, status=503)
