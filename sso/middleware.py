"""A session signed in through an identity provider lasts RECKON_OIDC_REVALIDATE_S seconds before
the person is sent back through the provider, which re-reads their groups: so a role taken away
at the provider is gone from every session within that bound (a sign-in anywhere applies it at
once to the account's roles, which every session reads at each request).

A session signed in with a password is bounded too (`PasswordSessionBound`): it lasts
RECKON_PASSWORD_SESSION_S (a break-glass one RECKON_BREAK_GLASS_SESSION_S), and it ends at its next
request once RECKON_SSO_ONLY applies to its account, so turning SSO only on ends every password
session but the break-glass accounts'."""

from __future__ import annotations

import time
from urllib.parse import urlencode

from django.conf import settings
from django.contrib.auth import logout
from django.http import HttpResponseRedirect
from django.urls import reverse
from django_htmx.http import HttpResponseClientRedirect

from sso.trail import BREAK_GLASS_KEY, PASSWORD_SESSION_KEY, SESSION_KEY
from sso.views import is_break_glass

REVALIDATE_REASON = "the sign-in through the identity provider is checked again"


def _sign_out(request, reason: str, **query: str):
    """End the session (on the trail, with `reason`) and send the person to the sign-in page."""
    request.reckon_sign_out_reason = reason
    logout(request)
    login = f"{reverse('login')}?{urlencode({'next': request.get_full_path(), **query})}"
    if request.headers.get("HX-Request") == "true":  # runs before HtmxMiddleware
        return HttpResponseClientRedirect(login)
    return HttpResponseRedirect(login)


class ProviderSessionRevalidation:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        through = request.session.get(SESSION_KEY) if request.user.is_authenticated else None
        if through and time.time() - through.get("at", 0) > settings.RECKON_OIDC_REVALIDATE_S:
            return _sign_out(request, f"{REVALIDATE_REASON} after {settings.RECKON_OIDC_REVALIDATE_S} s",
                             again=through["provider"])
        return self.get_response(request)


class PasswordSessionBound:
    """Ends a password session that SSO only now refuses, or that is older than its bound (one
    from before this bound existed carries no start, and ends: password sessions used to last the
    cookie's two weeks)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if not request.user.is_authenticated or request.session.get(SESSION_KEY):
            return self.get_response(request)
        if settings.RECKON_SSO_ONLY and not is_break_glass(request.user):
            return _sign_out(request, "password sign-in is off (RECKON_SSO_ONLY): the password session ends")
        break_glass = bool(request.session.get(BREAK_GLASS_KEY))
        bound = settings.RECKON_BREAK_GLASS_SESSION_S if break_glass else settings.RECKON_PASSWORD_SESSION_S
        started = request.session.get(PASSWORD_SESSION_KEY)
        if started is None or time.time() - started > bound:
            kind = "break-glass" if break_glass else "password"
            return _sign_out(request, f"a {kind} session lasts at most {bound} s: sign in again")
        return self.get_response(request)
