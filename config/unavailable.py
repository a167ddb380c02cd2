"""503 with Retry-After, not 500, while the database has no primary (a failover, a restart).

A view that meets the outage raises a database error; this middleware's `process_exception` (and
the worker API's own exception handler, api/http.py) answers 503 with Retry-After instead, and the
broken connection is dropped, so the next request connects to whichever node is primary then.
What fails before any view (a session read in a middleware) reaches `server_error`, Django's
handler500, which answers the same way.
"""

from __future__ import annotations

import sys

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults

from ledger.availability import RETRY_AFTER_S, database_unavailable, drop_broken_connections

MESSAGE = ("Reckon's database is unavailable (a failover or a restart). Nothing of this request is known to "
           "have been saved: try again in a few seconds.")


def unavailable_response(request: HttpRequest) -> HttpResponse:
    drop_broken_connections()
    if request.path.startswith("/api/") or "application/json" in request.headers.get("Accept", ""):
        response: HttpResponse = JsonResponse({"error": {"code": "database_unavailable", "message": MESSAGE}},
                                              status=503)
    else:
        response = HttpResponse(MESSAGE, status=503, content_type="text/plain; charset=utf-8")
    response["Retry-After"] = str(RETRY_AFTER_S)
    return response


class DatabaseUnavailable:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        if database_unavailable(exception):
            return unavailable_response(request)
        return None


def server_error(request: HttpRequest) -> HttpResponse:
    """handler500: an outage answers 503 with Retry-After; anything else Django's own 500."""
    exc = sys.exc_info()[1]
    if exc is not None and database_unavailable(exc):
        return unavailable_response(request)
    return defaults.server_error(request)
