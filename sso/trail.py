"""Writes the sign-in trail (SignInEvent) from Django's login signals and from the provider and
break-glass steps (`record`). A session signed in through a provider carries SESSION_KEY:
{"provider", "issuer", "subject", "at"}; the trail and the re-validation read it. A password session
carries PASSWORD_SESSION_KEY (its start), which bounds its age."""

from __future__ import annotations

import time

from django.contrib.auth.signals import user_logged_in, user_logged_out, user_login_failed
from django.dispatch import receiver
from django.http import HttpRequest

from console.hardening import client_address
from console.models import SignInEvent

SESSION_KEY = "reckon_provider_sign_in"
BREAK_GLASS_KEY = "reckon_break_glass"
# When a password (or break-glass) session began: sso.middleware.PasswordSessionBound ends it later.
PASSWORD_SESSION_KEY = "reckon_password_sign_in_at"  # nosec B105  # a session key's name, not a password


def record(request: HttpRequest | None, kind: str, *, user=None, username: str = "", method: str = "password",
           issuer: str = "", subject: str = "", detail: str = "") -> SignInEvent:
    return SignInEvent.objects.create(
        kind=kind,
        username=(user.get_username() if user is not None else username)[:150],
        user_pk=user.pk if user is not None else None,
        method=method[:100],
        issuer=issuer[:300],
        subject=subject[:300],
        address=client_address(request) if request is not None else None,
        detail=detail,
    )


@receiver(user_logged_in)
def _signed_in(sender, request, user, **kwargs) -> None:
    if request is None:
        return
    through = request.session.get(SESSION_KEY)
    if through:
        record(request, SignInEvent.SIGNED_IN, user=user, method=through["provider"], issuer=through["issuer"],
               subject=through["subject"])
        return
    request.session[PASSWORD_SESSION_KEY] = time.time()
    if request.session.get(BREAK_GLASS_KEY):
        record(request, SignInEvent.BREAK_GLASS, user=user, detail="password and TOTP code, with provider sign-in required")
    else:
        record(request, SignInEvent.SIGNED_IN, user=user)


@receiver(user_logged_out)
def _signed_out(sender, request, user, **kwargs) -> None:
    if request is None or user is None:
        return
    through = request.session.get(SESSION_KEY) or {}
    record(request, SignInEvent.SIGNED_OUT, user=user, method=through.get("provider", "password"),
           issuer=through.get("issuer", ""), subject=through.get("subject", ""),
           detail=getattr(request, "reckon_sign_out_reason", ""))


@receiver(user_login_failed)
def _failed(sender, credentials, request=None, **kwargs) -> None:
    username = str((credentials or {}).get("username", ""))
    # sso.second_factor sends a wrong TOTP code as a failed sign-in too, saying so.
    detail = (credentials or {}).get("reckon_detail") or "wrong username or password"
    record(request, SignInEvent.FAILED, username=username, detail=detail)
