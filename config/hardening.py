"""Web hardening that settings alone cannot express: who the client is behind trusted proxies,
and, for django-axes' login throttle, which username a failure counts against and what a
locked-out client sees. axes calls these by their dotted paths (the AXES_*_CALLABLE settings).
"""

from __future__ import annotations

import ipaddress

from axes.helpers import get_cool_off
from django.conf import settings
from django.contrib.auth import get_user_model
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


def locked_out(request: HttpRequest, original_response: HttpResponse | None, credentials: dict | None):
    """The page a locked-out client gets (429, with Retry-After). The failure that led here has
    just been recorded, and every failure restarts the window, so the wait is exactly one window."""
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
