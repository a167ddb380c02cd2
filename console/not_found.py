"""Reckon's own "Not found" page for every console address that has nothing, in every mode.

With DEBUG on (`make run`, the tests) Django answers a 404 with its debug page, which lists every
URL pattern of the project: the wrong page for a person following a stale link, and the demo is
where new users follow one. This middleware renders the console's 404.html instead, as production
does, for a view's Http404 (a missing job, or a job outside the person's tenants) and for an
address no URL pattern takes. The worker API answers its own JSON 404s before it (api/lane.py);
an address that only lacks its trailing slash is left to CommonMiddleware, which redirects it.
"""

from __future__ import annotations

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import Resolver404, get_resolver
from django.views.defaults import page_not_found


class OwnNotFoundPage:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        resolver = get_resolver(getattr(request, "urlconf", None))
        try:
            resolver.resolve(request.path_info)
        except Resolver404 as missing:
            if not self._slash_redirects(request, resolver):
                return page_not_found(request, missing)
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if isinstance(exception, Http404):
            return page_not_found(request, exception)
        return None

    @staticmethod
    def _slash_redirects(request: HttpRequest, resolver) -> bool:
        if not settings.APPEND_SLASH or request.path_info.endswith("/"):
            return False
        try:
            resolver.resolve(request.path_info + "/")
        except Resolver404:
            return False
        return True
