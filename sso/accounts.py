"""One person, several accounts: an administrator links a local account and its sign-in provider
twin (`op_a` and `op_a@testidp`) so that four eyes treats them as one person (approvals.AccountLink),
attaches a provider subject to an existing account (after a first sign-in was refused because its
e-mail address is that account's), or retires an account. The only code that writes AccountLink
rows or attaches a subject; every change is on the admin trail, in the same transaction."""

from __future__ import annotations

from allauth.socialaccount.models import SocialAccount
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction

from approvals.models import AccountLink
from console.admin_trail import record_change, snapshot
from console.models import AdminAuditEntry


class AccountLinkRefused(ValueError):
    """The link, attachment or retirement is not allowed; nothing was changed."""


def _locked(users):
    """Lock the accounts' rows, in key order, so that two administrators' links take turns."""
    keys = sorted({user.pk for user in users})
    return list(get_user_model().objects.select_for_update().filter(pk__in=keys).order_by("pk"))


@transaction.atomic
def accounts_link(*, accounts: list, by) -> int:
    """Make `accounts` (two or more) one person, together with every account already linked to any
    of them. Returns the person's number (the smallest account key among them)."""
    if len({user.pk for user in accounts}) < 2:
        raise AccountLinkRefused("give two different accounts to link")
    _locked(accounts)
    persons = set(AccountLink.objects.filter(user__in=accounts).values_list("person", flat=True))
    members = {user.pk for user in accounts} | set(
        AccountLink.objects.filter(person__in=persons).values_list("user_id", flat=True))
    if len(persons) == 1 and members == set(AccountLink.objects.filter(person__in=persons)
                                              .values_list("user_id", flat=True)):
        raise AccountLinkRefused("these accounts are already linked: they are one person")
    person = min(members)
    for pk in sorted(members):
        link = AccountLink.objects.filter(user_id=pk).first()
        if link is None:
            link = AccountLink.objects.create(user_id=pk, person=person, linked_by=by.get_username())
            record_change(by, AdminAuditEntry.ADDED, link, {}, snapshot(link))
        elif link.person != person:
            before = snapshot(link)
            link.person, link.linked_by = person, by.get_username()
            link.save(update_fields=["person", "linked_by"])
            record_change(by, AdminAuditEntry.CHANGED, link, before, snapshot(link))
    return person


@transaction.atomic
def account_unlink(*, account, by) -> None:
    """`account` is its own person again. Approval requests already opened keep the identities they
    recorded as excluded: an unlink does not lift an exclusion made while the link stood."""
    _locked([account])
    link = AccountLink.objects.filter(user=account).first()
    if link is None:
        raise AccountLinkRefused(f"{account.get_username()} is linked to no other account")
    rest = list(AccountLink.objects.filter(person=link.person).exclude(pk=link.pk))
    for gone in [link, *rest] if len(rest) == 1 else [link]:  # one account alone is no link
        before, pk = snapshot(gone), gone.pk
        gone.delete()
        record_change(by, AdminAuditEntry.DELETED, gone, before, {}, pk=pk)


@transaction.atomic
def subject_attach(*, account, provider: str, subject: str, by) -> SocialAccount:
    """The person who signs in through `provider` as `subject` signs in to `account` from now on:
    what an administrator does after a first sign-in was refused because the provider's e-mail
    address is that account's (Reckon never joins accounts by e-mail address itself)."""
    if provider not in settings.RECKON_OIDC_PROVIDERS:
        raise AccountLinkRefused(f"no identity provider {provider!r} is configured "
                                 f"(RECKON_OIDC_PROVIDERS has {', '.join(sorted(settings.RECKON_OIDC_PROVIDERS)) or 'none'})")
    subject = (subject or "").strip()
    if not subject:
        raise AccountLinkRefused("give the provider's subject (the sign-in trail shows it)")
    _locked([account])
    taken = SocialAccount.objects.filter(provider=provider, uid=subject).select_related("user").first()
    if taken is not None:
        raise AccountLinkRefused(f"subject {subject!r} of {provider} already signs in to "
                                 f"{taken.user.get_username()}: link the two accounts instead, or retire one")
    linked = SocialAccount.objects.create(user=account, provider=provider, uid=subject, extra_data={})
    record_change(by, AdminAuditEntry.ADDED, linked, {}, snapshot(linked))
    return linked


@transaction.atomic
def account_retire(*, account, by) -> None:
    """Switch `account` off: it signs in no more, by password or provider. Its history stays, and
    four eyes still knows it (and, if linked, its person)."""
    _locked([account])
    account.refresh_from_db()
    if not account.is_active:
        raise AccountLinkRefused(f"{account.get_username()} is already switched off")
    before = snapshot(account)
    account.is_active = False
    account.save(update_fields=["is_active"])
    record_change(by, AdminAuditEntry.CHANGED, account, before, snapshot(account))
