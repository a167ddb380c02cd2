"""Web hardening that settings alone cannot express: a Content-Security-Policy header and a
throttled console login."""

from __future__ import annotations

import hashlib

from django.conf import settings
from django.contrib.auth.views import LoginView
from django.core.cache import cache
from django.http import HttpResponse


class ContentSecurityPolicyMiddleware:
    """Adds RECKON_CSP to every response that does not set its own policy."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if settings.RECKON_CSP:
            response.headers.setdefault("Content-Security-Policy", settings.RECKON_CSP)
        return response


def _failure_key(request, username: str) -> str:
    who = f"{username.strip().lower()}|{request.META.get('REMOTE_ADDR', '')}"
    return "login-failures:" + hashlib.sha256(who.encode()).hexdigest()


class ThrottledLoginView(LoginView):
    """After RECKON_LOGIN_FAILURE_LIMIT failures for one username from one address within
    RECKON_LOGIN_FAILURE_WINDOW seconds, refuse further tries with 429 until the window ends."""

    def post(self, request, *args, **kwargs):
        key = _failure_key(request, request.POST.get("username", ""))
        if cache.get(key, 0) >= settings.RECKON_LOGIN_FAILURE_LIMIT:
            minutes = max(1, settings.RECKON_LOGIN_FAILURE_WINDOW // 60)
            response = HttpResponse(
                "Too many failed log-in attempts for this username from your address. "
                f"Try again in {minutes} minute{'s' if minutes != 1 else ''}.\n",
                status=429,
                content_type="text/plain; charset=utf-8",
            )
            response["Retry-After"] = str(settings.RECKON_LOGIN_FAILURE_WINDOW)
            return response
        return super().post(request, *args, **kwargs)

    def form_invalid(self, form):
        key = _failure_key(self.request, self.request.POST.get("username", ""))
        if not cache.add(key, 1, timeout=settings.RECKON_LOGIN_FAILURE_WINDOW):
            try:
                cache.incr(key)
            except ValueError:  # expired between add and incr
                cache.add(key, 1, timeout=settings.RECKON_LOGIN_FAILURE_WINDOW)
        return super().form_invalid(form)

    def form_valid(self, form):
        cache.delete(_failure_key(self.request, form.get_user().get_username()))
        return super().form_valid(form)
