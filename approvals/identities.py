"""Who a person is behind their Reckon account, for four eyes: the local account, and every
identity-provider subject linked to it, each as `issuer#subject` (one subject reached through two
provider entries with one issuer is one identity)."""

from __future__ import annotations

from allauth.socialaccount.models import SocialAccount
from django.conf import settings

# A local account's identity: `account:<pk>` (the database's four-eyes trigger reads this prefix too).
ACCOUNT = "account:"


def issuer_of(account: SocialAccount) -> str:
    claims = account.extra_data.get("id_token") or {}
    return str(claims.get("iss") or settings.RECKON_OIDC_PROVIDERS.get(account.provider, account.provider)).rstrip("/")


def subject_key(issuer: str, subject: str) -> str:
    return f"{issuer.rstrip('/')}#{subject}"


def identities_of(user) -> list[str]:
    """The local account and the provider subjects linked to `user`, sorted."""
    if user is None:
        return []
    keys = {f"{ACCOUNT}{user.pk}"}
    for account in SocialAccount.objects.filter(user=user):
        keys.add(subject_key(issuer_of(account), account.uid))
    return sorted(keys)


def provider_identity(user) -> dict:
    """The provider and subject the person signs in with (their first linked one), or their local
    account when none is linked (a break-glass or password account)."""
    account = SocialAccount.objects.filter(user=user).order_by("pk").first() if user is not None else None
    if account is None:
        return {"provider": "password", "subject": f"{ACCOUNT}{user.pk}" if user is not None else ""}
    return {"provider": account.provider, "issuer": issuer_of(account), "subject": account.uid}
