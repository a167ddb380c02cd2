"""The worker API's own lane through Django: past the security middleware, straight to its view.

The console's middleware (sessions, CSRF, the signed-in user, sign-in revalidation, messages,
htmx, the login throttle, static files) serves people with a browser; a worker API request
carries a Bearer token, never a cookie, and reads none of it. Measured on the worker cycle, that
middleware was about a third of each API request's CPU. So, placed right after Django's
SecurityMiddleware (which keeps the HTTPS redirect, HSTS, nosniff, the referrer and opener
policies for every response), this middleware hands a request under /api/v1/ to the URL resolver
and the view directly, and gives the answer the headers an API needs: no framing, and a
Content-Security-Policy that allows nothing (JSON loads no script, style or image). Every other
path goes through the whole chain as before.
"""

from __future__ import annotations

from django.core.handlers.base import BaseHandler
from django.core.handlers.exception import convert_exception_to_response
from django.urls import reverse

# The API answers JSON only: nothing may be loaded on its behalf, nor may it be framed.
API_CONTENT_SECURITY_POLICY = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"


def api_prefix() -> str:
    """Where the worker API is mounted (config/urls.py), as request.path starts (script prefix included)."""
    return reverse("api:openapi-json").removesuffix("openapi.json")


class _ViewOnly(BaseHandler):
    """Django's request handling without middleware: resolve the URL, call the view (which may
    raise: convert_exception_to_response answers as Django would, 404 and 500 included)."""

    def __init__(self):
        self._view_middleware, self._template_response_middleware, self._exception_middleware = [], [], []


class WorkerApiLane:
    def __init__(self, get_response):
        self.get_response = get_response
        self.view_only = convert_exception_to_response(_ViewOnly()._get_response)
        self.prefix: str | None = None  # resolved on the first request, once the URLconf is loaded

    def __call__(self, request):
        if self.prefix is None:
            self.prefix = api_prefix()
        if not request.path.startswith(self.prefix):
            return self.get_response(request)
        response = self.view_only(request)
        response.headers.setdefault("X-Frame-Options", "DENY")
        response.headers.setdefault("Content-Security-Policy", API_CONTENT_SECURITY_POLICY)
        if not response.streaming and "Content-Length" not in response.headers:
            response.headers["Content-Length"] = str(len(response.content))
        return response
