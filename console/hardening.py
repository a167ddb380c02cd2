"""Web hardening that settings alone cannot express: who the client is behind trusted proxies,
and, for django-axes' login throttle, which username a failure counts against, the per-account
slow-down (`LoginThrottle`) and what a refused client sees. axes calls these by their dotted
paths (AXES_HANDLER and the AXES_*_CALLABLE settings).
"""

from __future__ import annotations

import ipaddress
import math
from datetime import timedelta

from axes.handlers.database import AxesDatabaseHandler
from axes.helpers import get_cool_off
from axes.models import AccessAttempt, AccessLog
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import Max, Sum
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def _address(text: str) -> Address | None:
    try:
        address = ipaddress.ip_address(text.strip())
    except ValueError:
        return None
    # A dual-stack listener reports IPv4 peers as ::ffff:a.b.c.d; compare them as IPv4.
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        return address.ipv4_mapped
    return address


def _trusted(address: Address) -> bool:
    return any(address in ipaddress.ip_network(net) for net in settings.RECKON_TRUSTED_PROXIES)


def client_address(request: HttpRequest) -> str | None:
    """The client's address: the direct peer, unless the peer is one of RECKON_TRUSTED_PROXIES.

    Then X-Forwarded-For is read from the right (each proxy appends the address it received the
    request from), passing over trusted proxies: the first hop that is not one is the client.
    Anything left of it was written by the client and is ignored; an X-Forwarded-For from a peer
    that is not a trusted proxy is ignored altogether. A malformed hop ends the walk at the last
    trusted one. None when the peer has no IP address (nothing to key on).
    """
    client = _address(request.META.get("REMOTE_ADDR", ""))
    if client is None:
        return None
    if not _trusted(client):
        return str(client)
    for hop in reversed(request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")):
        address = _address(hop)
        if address is None:
            break
        client = address
        if not _trusted(address):
            break
    return str(client)


def login_username(request: HttpRequest, credentials: dict | None) -> str | None:
    """The username a login failure counts against, normalised as Django normalises usernames
    (NFKC: a full-width `ａuditor` is `auditor`) and case-folded (Django refuses to create
    usernames that differ only in case), so every spelling of one account shares one count."""
    user_model = get_user_model()
    field = user_model.USERNAME_FIELD
    username = (credentials or {}).get(field)
    if username is None:
        username = request.POST.get(field)
    if username is None:
        return None
    return user_model.normalize_username(str(username).strip()).casefold()


# An address the account logged in from successfully within this long is the person's own: the
# per-account slow-down never applies to it.
KNOWN_ADDRESS_AGE = timedelta(days=90)


def account_wait(request: HttpRequest, credentials: dict | None) -> int:
    """Seconds this log-in attempt must wait because of failures for its username from *every*
    address (0: none).

    The per-(username, address) lock-out stops one address guessing; many addresses, each below
    the limit, could still guess on. So once an account has RECKON_LOGIN_ACCOUNT_LIMIT failures
    in the window (from anywhere), an attempt from an address the account has not logged in from
    in the last 90 days waits 2, 4, 8 … seconds after the account's latest failure, at most
    RECKON_LOGIN_ACCOUNT_MAX_WAIT, and is refused unchecked before then (the refusal counts as
    a failure, as axes counts any attempt it refuses). An address the person has logged in from
    is never slowed: nobody can keep a colleague out of their usual place by failing for them.
    """
    username = login_username(request, credentials)
    if not username:
        return 0
    now = timezone.now()
    recent = AccessAttempt.objects.filter(username=username, attempt_time__gte=now - get_cool_off(request))
    failures = recent.aggregate(count=Sum("failures_since_start"), latest=Max("attempt_time"))
    excess = (failures["count"] or 0) - settings.RECKON_LOGIN_ACCOUNT_LIMIT
    if excess < 0:
        return 0
    address = getattr(request, "axes_ip_address", None) or client_address(request)
    known = AccessLog.objects.filter(username__iexact=username, ip_address=address, attempt_time__gte=now - KNOWN_ADDRESS_AGE)
    if known.exists():  # axes logs the username as the account spells it
        return 0
    wait = min(2 ** (excess + 1), settings.RECKON_LOGIN_ACCOUNT_MAX_WAIT)
    return max(0, math.ceil(wait - (now - failures["latest"]).total_seconds()))


class LoginThrottle(AxesDatabaseHandler):
    """axes' database handler, plus the per-account slow-down (`account_wait`)."""

    def is_locked(self, request, credentials: dict | None = None) -> bool:
        if super().is_locked(request, credentials):
            return True
        request.reckon_account_wait = account_wait(request, credentials)
        if request.reckon_account_wait:
            # axes flags a refusal for its middleware only when a pair reaches its limit.
            request.axes_locked_out, request.axes_credentials = True, credentials
        return request.reckon_account_wait > 0


def locked_out(request: HttpRequest, original_response: HttpResponse | None, credentials: dict | None):
    """The page a refused client gets (429, with Retry-After): the account's slow-down, a few
    seconds; or this username and address locked out, for one window (the failure that led here
    has just been recorded, and every failure restarts the window)."""
    wait = getattr(request, "reckon_account_wait", 0)
    if wait and getattr(request, "axes_failures_since_start", 0) < settings.AXES_FAILURE_LIMIT:
        response = render(request, "registration/locked_out.html", {"wait": wait}, status=429)
        response["Retry-After"] = str(wait)
        return response
    window = get_cool_off(request)  # AXES_COOLOFF_TIME, from RECKON_LOGIN_FAILURE_WINDOW
    seconds = int(window.total_seconds())
    response = render(
        request,
        "registration/locked_out.html",
        {"until": timezone.now() + window, "minutes": -(-seconds // 60)},
        status=429,
    )
    response["Retry-After"] = str(seconds)
    return response
