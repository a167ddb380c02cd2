from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from alerts.conditions import starting_up
from console.access import READERS, fence_of, role_required
from console.selectors.alerts import firing_titles, silences
from console.selectors.charts import WINDOWS
from console.selectors.overview import overview as overview_figures
from console.selectors.overview_charts import overview_charts


@require_GET
@role_required(*READERS)
def overview(request: HttpRequest) -> HttpResponse:
    fence = fence_of(request.user)
    figures = overview_figures(fence)
    live = {"overview": figures, "alerts_firing": firing_titles(), "silences": silences(),
            "gate_starting": not figures.gate.open and starting_up(figures.gate)}
    if request.htmx:  # the live figures' refresh; the charts refresh on their own
        return render(request, "console/overview.html#overview-live", live)
    return render(request, "console/overview.html", {**live, "charts": overview_charts(_window(request), fence)})


@require_GET
@role_required(*READERS)
def charts(request: HttpRequest) -> HttpResponse:
    return render(request, "console/overview_charts.html",
                  {"charts": overview_charts(_window(request), fence_of(request.user))})


WINDOW_KEY = "overview_window"  # the session remembers the window last chosen


def _window(request: HttpRequest):
    """The charts' window from `?range=` (1h, 24h or 7d), remembered for the next visit; without
    one (or with anything else), the window last chosen, else the last 24 hours."""
    asked = request.GET.get("range", "")
    if asked in WINDOWS:
        if request.session.get(WINDOW_KEY) != asked:
            request.session[WINDOW_KEY] = asked
        return WINDOWS[asked]
    return WINDOWS.get(request.session.get(WINDOW_KEY, ""), WINDOWS["24h"])


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness and database reachability; no login, no details an outsider could use."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return JsonResponse({"ok": True, "database": "ok"})
    except Exception:
        return JsonResponse({"ok": False, "database": "unreachable"}, status=503)
