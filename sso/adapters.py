"""django-allauth's hooks, for Reckon: people come from identity providers only (no sign-up
pages), their roles and tenants follow the provider's groups at every sign-in, a first sign-in
whose e-mail address an account already has is refused with a page that says what to do, and every
failed provider sign-in is on the trail."""

from __future__ import annotations

import operator
import time
from functools import reduce

from allauth.account.adapter import DefaultAccountAdapter
from allauth.account.utils import user_username
from allauth.core.exceptions import ImmediateHttpResponse
from allauth.socialaccount.adapter import DefaultSocialAccountAdapter
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import Q
from django.shortcuts import render

from approvals.identities import issuer_of
from console.models import SignInEvent
from sso import roles, trail


class NoSignUp(DefaultAccountAdapter):
    """No account is made from a form: people are made in /admin/ or at their first provider sign-in."""

    def is_open_for_signup(self, request) -> bool:
        return False

    def pre_login(self, request, user, **kwargs):
        refused = super().pre_login(request, user, **kwargs)
        if refused:
            return refused
        sociallogin = (kwargs.get("signal_kwargs") or {}).get("sociallogin")
        if sociallogin is not None:
            account = sociallogin.account
            claims = {**(account.extra_data.get("id_token") or {}), **(account.extra_data.get("userinfo") or {})}
            roles.apply_grant(user, roles.grant_for(roles.groups_claim(claims)))
            request.session[trail.SESSION_KEY] = {
                "provider": account.provider, "issuer": issuer_of(account), "subject": account.uid, "at": time.time(),
            }
        return None

    def respond_user_inactive(self, request, user):
        """An account switched off in /admin/ stays off, whatever the provider says."""
        trail.record(request, SignInEvent.FAILED, user=user, method="provider",
                     detail="the account is inactive in Reckon (switched off in /admin/)")
        return render(request, "sso/inactive.html", {"username": user.get_username()}, status=403)


class ProviderSignIn(DefaultSocialAccountAdapter):
    def is_open_for_signup(self, request, sociallogin) -> bool:
        return True

    def pre_social_login(self, request, sociallogin) -> None:
        """A first sign-in whose e-mail address an existing account has makes no account and links
        none (the address alone proves nothing about who holds that account): the person is told to
        ask an administrator (`manage.py link_accounts subject`), and the trail records it. Without
        this, allauth sends them to a sign-up form Reckon does not have."""
        if sociallogin.is_existing:
            return
        addresses = sorted({address.email for address in sociallogin.email_addresses if address.email})
        if not addresses:
            return
        same_address = reduce(operator.or_, (Q(email__iexact=address) for address in addresses))
        holders = sorted(get_user_model()._default_manager.filter(same_address).values_list("username", flat=True))
        if not holders:
            return
        account = sociallogin.account
        name = settings.RECKON_OIDC_NAMES.get(account.provider, account.provider)
        trail.record(request, SignInEvent.FAILED, username=holders[0], method=account.provider,
                     issuer=issuer_of(account), subject=account.uid,
                     detail=(f"first sign-in through {name}: its e-mail address {', '.join(addresses)} is that of the "
                             f"Reckon account {', '.join(holders)}; no account was made or linked. An administrator "
                             f"links them: manage.py link_accounts subject {holders[0]} --provider {account.provider} "
                             f"--subject {account.uid} --by ADMIN")[:2000])
        raise ImmediateHttpResponse(render(request, "sso/email_taken.html", {
            "name": name, "addresses": addresses, "provider": account.provider, "subject": account.uid}, status=409))

    def populate_user(self, request, sociallogin, data):
        """The provider's preferred username when it is free; otherwise it with the provider's id
        (a provider never takes over an existing account by naming it)."""
        user = super().populate_user(request, sociallogin, data)
        wanted = (data.get("username") or sociallogin.account.uid)[:100]
        username = wanted
        if get_user_model()._default_manager.filter(username__iexact=username).exists():
            username = f"{wanted}@{sociallogin.account.provider}"[:150]
        user_username(user, username)
        return user

    def on_authentication_error(self, request, provider, error=None, exception=None, extra_context=None) -> None:
        reason = str(exception) if exception else f"the provider's answer was refused ({error})"
        if not exception and extra_context and "state_id" in extra_context:
            reason = "the callback's state is unknown or already used (a forged or replayed callback)"
        trail.record(request, SignInEvent.FAILED, method=provider.app.provider_id,
                     detail=reason[:500])
