"""`manage.py link_accounts link|unlink|subject|retire|list`: one person's accounts (sso.accounts)."""

from allauth.socialaccount.models import SocialAccount
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from approvals.models import AccountLink
from sso import accounts

BY_HELP = "the administrator doing this (an active user), recorded on the admin trail"


class Command(BaseCommand):
    help = ("Link the accounts of one person (four eyes treats them as one), attach a provider subject to an "
            "existing account, retire an account, or list the links. Every change is on the admin trail.")

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="command", required=True)
        link = sub.add_parser("link", help="make two or more accounts one person (e.g. op_a op_a@testidp)")
        link.add_argument("usernames", nargs="+", metavar="USERNAME")
        unlink = sub.add_parser("unlink", help="make an account its own person again")
        unlink.add_argument("username")
        subject = sub.add_parser("subject", help="sign-ins through PROVIDER as SUBJECT open USERNAME from now on")
        subject.add_argument("username")
        subject.add_argument("--provider", required=True, help="the provider's id in RECKON_OIDC_PROVIDERS")
        subject.add_argument("--subject", required=True, help="the provider's subject (on the sign-in trail)")
        retire = sub.add_parser("retire", help="switch an account off (its history stays)")
        retire.add_argument("username")
        for parser_ in (link, unlink, subject, retire):
            parser_.add_argument("--by", required=True, metavar="USERNAME", help=BY_HELP)
        sub.add_parser("list", help="every linked person and the accounts' provider subjects")

    def handle(self, *args, command, **options):
        if command == "list":
            return self._list()
        by = self._user(options.pop("by"))
        if not by.is_active:
            raise CommandError(f"{by.get_username()} is not an active user")
        try:
            getattr(self, f"_{command}")(by=by, **options)
        except accounts.AccountLinkRefused as refused:
            raise CommandError(str(refused)) from None

    @staticmethod
    def _user(username):
        user = get_user_model()._default_manager.filter(username=username).first()
        if user is None:
            raise CommandError(f"no account {username!r}")
        return user

    def _link(self, *, usernames, by, **_):
        person = accounts.accounts_link(accounts=[self._user(name) for name in usernames], by=by)
        names = AccountLink.objects.filter(person=person).order_by("user__username").values_list("user__username", flat=True)
        self.stdout.write(f"linked: {', '.join(names)} are one person (person {person})")

    def _unlink(self, *, username, by, **_):
        accounts.account_unlink(account=self._user(username), by=by)
        self.stdout.write(f"unlinked: {username} is its own person again")

    def _subject(self, *, username, provider, subject, by, **_):
        accounts.subject_attach(account=self._user(username), provider=provider, subject=subject, by=by)
        self.stdout.write(f"attached: signing in through {provider} as {subject} opens {username}")

    def _retire(self, *, username, by, **_):
        accounts.account_retire(account=self._user(username), by=by)
        self.stdout.write(f"retired: {username} is switched off")

    def _list(self):
        people: dict[int, list[str]] = {}
        for person, name in AccountLink.objects.order_by("person", "user__username").values_list("person", "user__username"):
            people.setdefault(person, []).append(name)
        for person, names in people.items():
            self.stdout.write(f"person {person}: {', '.join(names)}")
        for account in SocialAccount.objects.select_related("user").order_by("user__username"):
            self.stdout.write(f"{account.user.get_username()}: {account.provider} subject {account.uid}")
