"""A session signed in through an identity provider lasts RECKON_OIDC_REVALIDATE_S seconds before
the person is sent back through the provider, which re-reads their groups: so a role taken away
at the provider is gone from every session within that bound (a sign-in anywhere applies it at
once to the account's roles, which every session reads at each request)."""

from __future__ import annotations

import time
from urllib.parse import urlencode

from django.conf import settings
from django.contrib.auth import logout
from django.http import HttpResponseRedirect
from django.urls import reverse
from django_htmx.http import HttpResponseClientRedirect

from sso.trail import SESSION_KEY

REVALIDATE_REASON = "the sign-in through the identity provider is checked again"


class ProviderSessionRevalidation:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        through = request.session.get(SESSION_KEY) if request.user.is_authenticated else None
        if through and time.time() - through.get("at", 0) > settings.RECKON_OIDC_REVALIDATE_S:
            request.reckon_sign_out_reason = f"{REVALIDATE_REASON} after {settings.RECKON_OIDC_REVALIDATE_S} s"
            logout(request)
            login = f"{reverse('login')}?{urlencode({'next': request.get_full_path(), 'again': through['provider']})}"
            if request.headers.get("HX-Request") == "true":  # runs before HtmxMiddleware
                return HttpResponseClientRedirect(login)
            return HttpResponseRedirect(login)
        return self.get_response(request)
