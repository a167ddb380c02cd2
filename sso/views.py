"""The sign-in pages: the password form (off for all but break-glass accounts when sign-in through
a provider is required), the break-glass TOTP step, and the start of a provider sign-in."""

from __future__ import annotations

import time
from urllib.parse import urlsplit

from allauth.socialaccount.providers.openid_connect import views as oidc_views
from django import forms
from django.conf import settings
from django.contrib.auth import get_user_model, login
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.signals import user_login_failed
from django.contrib.auth.views import LoginView
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.debug import sensitive_post_parameters
from django.views.decorators.http import require_http_methods, require_POST
from requests import RequestException

from console.models import SignInEvent
from sso import trail
from sso.second_factor import break_glass_code_check

PENDING_KEY = "reckon_break_glass_pending"
# The TOTP step must follow the password within this long.
PENDING_SECONDS = 300


def providers() -> list[dict]:
    return [{"id": provider, "name": settings.RECKON_OIDC_NAMES.get(provider, provider)}
            for provider in settings.RECKON_OIDC_PROVIDERS]


def provider_origins() -> list[str]:
    """The providers' origins: the sign-in page's forms go there (through our redirect), which the
    Content-Security-Policy's form-action must allow."""
    return sorted({f"{urlsplit(issuer).scheme}://{urlsplit(issuer).netloc}" for issuer in settings.RECKON_OIDC_PROVIDERS.values()})


def is_break_glass(user) -> bool:
    return user.get_username() in settings.RECKON_BREAK_GLASS_ACCOUNTS


class PasswordSignInForm(AuthenticationForm):
    def clean(self):
        """With SSO only, a username that is no break-glass account is refused before its password
        is looked at: one answer for a right and a wrong password (and for no such account), with no
        password hash computed, counted as a failed sign-in (django-axes, the trail)."""
        username = self.cleaned_data.get("username")
        if settings.RECKON_SSO_ONLY and username is not None and username not in settings.RECKON_BREAK_GLASS_ACCOUNTS:
            user_login_failed.send(sender=__name__, request=self.request, credentials={
                "username": username,
                "reckon_detail": "password sign-in is off (RECKON_SSO_ONLY) and this is no break-glass account; "
                                 "the password was not checked"})
            names = " or ".join(p["name"] for p in providers())
            raise ValidationError(f"Password sign-in is off here: sign in through {names}.", code="sso_only")
        return super().clean()


class SignInView(LoginView):
    form_class = PasswordSignInForm

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        again = self.request.GET.get("again")
        context.update(providers=providers(), sso_only=settings.RECKON_SSO_ONLY,
                       again=settings.RECKON_OIDC_NAMES.get(again, again) if again in settings.RECKON_OIDC_PROVIDERS else None,
                       revalidate_minutes=max(1, settings.RECKON_OIDC_REVALIDATE_S // 60))
        return context

    def render_to_response(self, context, **kwargs):
        response = super().render_to_response(context, **kwargs)
        if context.get("providers"):
            response._csp_update = {"form-action": provider_origins()}  # django-csp adds these to 'self'
        return response

    def form_valid(self, form):
        user = form.get_user()
        if settings.RECKON_SSO_ONLY and is_break_glass(user):
            self.request.session[PENDING_KEY] = {"user": user.pk, "backend": user.backend, "at": time.time(),
                                                 "next": self.get_success_url()}
            return redirect("break_glass_code")
        return super().form_valid(form)


class CodeForm(forms.Form):
    code = forms.CharField(label="TOTP code", max_length=12, widget=forms.TextInput(
        attrs={"autocomplete": "one-time-code", "inputmode": "numeric", "autofocus": True}))


@sensitive_post_parameters("code")
@require_http_methods(["GET", "POST"])
def break_glass_code(request: HttpRequest) -> HttpResponse:
    """The second factor of a break-glass sign-in: the account's TOTP code (allauth.mfa), checked
    by sso.second_factor (wrong codes counted per account, each code used once)."""
    pending = request.session.get(PENDING_KEY)
    if not pending or time.time() - pending["at"] > PENDING_SECONDS:
        request.session.pop(PENDING_KEY, None)
        return redirect("login")
    user = get_user_model()._default_manager.get(pk=pending["user"])
    form = CodeForm(request.POST or None)
    check = None
    if request.method == "POST" and form.is_valid():
        check = break_glass_code_check(request=request, user=user, code=form.cleaned_data["code"].strip())
        if check.accepted:
            request.session.pop(PENDING_KEY)
            request.session[trail.BREAK_GLASS_KEY] = True
            login(request, user, backend=pending["backend"])
            request.session[trail.BREAK_GLASS_KEY] = True  # login() may start a new session
            target = pending["next"]
            if not url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
                target = settings.LOGIN_REDIRECT_URL
            return HttpResponseRedirect(target)
        if not check.checked:
            trail.record(request, SignInEvent.FAILED, user=user, detail=f"break-glass TOTP refused unchecked: {check.error}")
    error = check.error if check else None
    response = render(request, "sso/break_glass_code.html", {"form": form, "error": error, "username": user.get_username()},
                      status=(429 if check.wait else 400) if check else 200)
    if check and check.wait:
        response["Retry-After"] = str(check.wait)
    return response


@require_POST
def provider_login(request: HttpRequest, provider_id: str) -> HttpResponse:
    """Start a sign-in through `provider_id`; a provider that does not answer gets a clear page
    (not a 500), which says that break-glass accounts can still sign in with their password."""
    try:
        return oidc_views.login(request, provider_id)
    except RequestException as error:
        name = settings.RECKON_OIDC_NAMES.get(provider_id, provider_id)
        trail.record(request, SignInEvent.FAILED, method=provider_id,
                     detail=f"the identity provider did not answer: {error.__class__.__name__}")
        return render(request, "sso/provider_down.html", {"name": name, "sso_only": settings.RECKON_SSO_ONLY},
                      status=503)
