"""The break-glass TOTP check, held in PostgreSQL so that it holds across sessions, web processes
and hosts: wrong codes count per account (after CODE_TRIES of them the account waits 2, 4, 8 …
seconds after its latest wrong code, at most RECKON_LOGIN_FAILURE_WINDOW, and a code sent before
then is refused unchecked); each wrong code is a failed sign-in for django-axes and the trail (so a
username and address axes has locked out get no code checked either, and the break-glass alert
counts them: alerts.conditions.break_glass_guessing); and
a code's time step is used once (UsedCode's unique constraint), never an earlier one after it."""

from __future__ import annotations

import math
from dataclasses import dataclass

from allauth.core.internal.cryptokit import compare_user_code
from allauth.mfa.models import Authenticator
from allauth.mfa.totp.internal.auth import format_hotp_value, hotp_value, yield_hotp_counters_from_time
from allauth.mfa.utils import decrypt
from axes.handlers.proxy import AxesProxyHandler
from django.conf import settings
from django.contrib.auth.signals import user_login_failed
from django.db import IntegrityError, transaction
from django.db.models import Max
from django.http import HttpRequest
from django.utils import timezone

from sso.models import CodeFailures, UsedCode

# Wrong codes for one account, from any session, before it waits.
CODE_TRIES = 5


@dataclass(frozen=True)
class CodeCheck:
    accepted: bool
    error: str = ""
    wait: int = 0  # seconds before another code is checked (refused unchecked until then)
    checked: bool = True  # False: refused before the code was looked at


def code_wait(failures: CodeFailures) -> int:
    """Seconds the account must still wait before a code is checked (0: none)."""
    excess = failures.failures - CODE_TRIES
    if excess < 0:
        return 0
    wait = min(2 ** (excess + 1), settings.RECKON_LOGIN_FAILURE_WINDOW)
    return max(0, math.ceil(wait - (timezone.now() - failures.latest_at).total_seconds()))


def _matching_step(secret: str, code: str) -> int | None:
    for step in yield_hotp_counters_from_time():
        if compare_user_code(actual=code, expected=format_hotp_value(hotp_value(secret, step))):
            return step
    return None


@transaction.atomic
def break_glass_code_check(*, request: HttpRequest, user, code: str) -> CodeCheck:
    """Check `code` for `user`, the account's row locked: two processes checking codes for one
    account take turns, so neither the count nor "used once" can be raced."""
    if AxesProxyHandler.is_locked(request, {"username": user.get_username()}):
        window = int(settings.AXES_COOLOFF_TIME.total_seconds())
        return CodeCheck(False, "Too many failed sign-ins for this account from your address: try again in "
                                f"{-(-window // 60)} minutes. This code was not checked.", window, checked=False)
    CodeFailures.objects.get_or_create(user=user)
    failures = CodeFailures.objects.select_for_update().get(user=user)
    wait = code_wait(failures)
    if wait:
        return CodeCheck(False, f"Too many wrong codes for this account: wait {wait} s and try again. "
                                "This code was not checked.", wait, checked=False)
    authenticator = Authenticator.objects.filter(user=user, type=Authenticator.Type.TOTP).first()
    if authenticator is None:
        return CodeCheck(False, "This break-glass account has no TOTP set up: an administrator runs "
                                "`manage.py break_glass_totp`.")
    step = _matching_step(decrypt(authenticator.data["secret"]), code)
    if step is not None:
        latest = UsedCode.objects.filter(user=user).aggregate(step=Max("time_step"))["step"]
        if latest is None or step > latest:
            try:
                with transaction.atomic():
                    UsedCode.objects.create(user=user, time_step=step)
            except IntegrityError:
                pass  # another process used this step first
            else:
                failures.failures = 0
                failures.save(update_fields=["failures"])
                return CodeCheck(True)
    failures.failures += 1
    failures.latest_at = timezone.now()
    failures.save(update_fields=["failures", "latest_at"])
    error = "That code is wrong or already used."
    # A failed sign-in like a wrong password: django-axes counts it (and locks the password step
    # of this username and address at its limit), and the trail records it (sso.trail).
    user_login_failed.send(sender=__name__, request=request,
                           credentials={"username": user.get_username(), "reckon_detail": f"break-glass TOTP refused: {error}"})
    return CodeCheck(False, error, code_wait(failures))
