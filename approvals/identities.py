"""Who a person is behind their Reckon account, for four eyes: the local account and the accounts an
administrator linked to it (AccountLink: one person's local account and provider twin), and every
identity-provider subject of those accounts, each as `issuer#subject` (one subject reached through
two provider entries with one issuer is one identity). And who an event's actor was: events name
people by username, so a name is matched to the account that had it then (FormerUsername)."""

from __future__ import annotations

from datetime import datetime

from allauth.socialaccount.models import SocialAccount
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import Q

# A local account's identity: `account:<pk>` (the database's four-eyes trigger reads this prefix too).
ACCOUNT = "account:"


def issuer_of(account: SocialAccount) -> str:
    claims = account.extra_data.get("id_token") or {}
    return str(claims.get("iss") or settings.RECKON_OIDC_PROVIDERS.get(account.provider, account.provider)).rstrip("/")


def subject_key(issuer: str, subject: str) -> str:
    return f"{issuer.rstrip('/')}#{subject}"


def accounts_of_person(user) -> list[int]:
    """The keys of `user`'s account and of every account linked to it (AccountLink), sorted."""
    from approvals.models import AccountLink

    if user is None:
        return []
    linked = AccountLink.objects.filter(person__in=AccountLink.objects.filter(user=user).values("person"))
    return sorted({user.pk, *linked.values_list("user_id", flat=True)})


def identities_of(user) -> list[str]:
    """The accounts of `user`'s person and the provider subjects linked to them, sorted."""
    accounts = accounts_of_person(user)
    keys = {f"{ACCOUNT}{pk}" for pk in accounts}
    for account in SocialAccount.objects.filter(user_id__in=accounts):
        keys.add(subject_key(issuer_of(account), account.uid))
    return sorted(keys)


class NameHistory:
    """Which account a username named at a given time, from the accounts' names now and the names
    they went by before a rename (FormerUsername): a rename cannot make an event's actor nobody."""

    def __init__(self, names):
        names = set(names)
        self.users = list(get_user_model().objects.filter(
            Q(username__in=names) | Q(former_usernames__username__in=names)).distinct()
            .order_by("-pk").prefetch_related("former_usernames"))  # newest first: its date_joined decides

    def account(self, name: str, at: datetime | None = None):
        """The account called `name` at `at` (None: now), or None."""
        for user in self.users:
            if self._name_at(user, at) == name:
                return user
        return None

    @staticmethod
    def _name_at(user, at: datetime | None) -> str | None:
        if at is not None and user.date_joined > at:
            return None  # made since: a newcomer who took a former name is not who wrote under it
        if at is not None:
            for former in sorted(user.former_usernames.all(), key=lambda row: row.until):
                if former.until > at:
                    return former.username
        return user.get_username()


def account_named(name: str, at: datetime | None = None):
    """The account called `name` at `at` (None: now), or None."""
    return NameHistory([name]).account(name, at)


def provider_identity(user) -> dict:
    """The provider and subject the person signs in with (their first linked one), or their local
    account when none is linked (a break-glass or password account)."""
    account = SocialAccount.objects.filter(user=user).order_by("pk").first() if user is not None else None
    if account is None:
        return {"provider": "password", "subject": f"{ACCOUNT}{user.pk}" if user is not None else ""}
    return {"provider": account.provider, "issuer": issuer_of(account), "subject": account.uid}
