from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from console.access import READERS, fence_of, role_required
from console.selectors.overview import overview as overview_figures


@require_GET
@role_required(*READERS)
def overview(request: HttpRequest) -> HttpResponse:
    template = "console/overview.html#overview-live" if request.htmx else "console/overview.html"
    return render(request, template, {"overview": overview_figures(fence_of(request.user))})


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness and database reachability; no login, no details an outsider could use."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return JsonResponse({"ok": True, "database": "ok"})
    except Exception:
        return JsonResponse({"ok": False, "database": "unreachable"}, status=503)
