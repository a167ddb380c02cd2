"""`manage.py worker_token create|revoke|list`: issue and withdraw worker API tokens."""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from api import tokens
from api.models import WorkerToken


class Command(BaseCommand):
    help = "Create, revoke or list worker API tokens (the token is printed once, on creation)."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="command", required=True)
        create = sub.add_parser("create", help="issue a token and print it once")
        create.add_argument("--name", required=True)
        create.add_argument("--tenant", action="append", required=True, help='repeatable; "*" for all')
        create.add_argument("--action", action="append", required=True, help='repeatable; "*" for all')
        by_help = ("the user doing this, recorded in the admin trail (and, for a token, as its issuer, who may "
                   "not approve a replay its answers lead to); default: the operating-system user")
        create.add_argument("--by", metavar="USERNAME", help=by_help + (
            '; required (an active user) for a token that can reach an irreversible action: "*", a named '
            "irreversible action, or one not declared here"))
        revoke = sub.add_parser("revoke", help="revoke by name or prefix")
        revoke.add_argument("token", help="the token's name or its prefix (rk_…)")
        revoke.add_argument("--by", metavar="USERNAME", help=by_help)
        sub.add_parser("list", help="every token with its scope and state")

    def handle(self, *args, command, **options):
        getattr(self, f"_{command}")(**options)

    def _create(self, *, name, tenant, action, by=None, **_):
        try:
            issued = tokens.worker_token_create(name=name, tenants=tenant, actions=action, created_by=self._user(by))
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        self.stderr.write(f"created {issued.worker_token}; the token is shown once, store it now:")
        self.stdout.write(issued.token)

    @staticmethod
    def _user(username):
        if not username:
            return None
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user {username!r}")
        return user

    def _revoke(self, *, token, by=None, **_):
        matches = list(WorkerToken.objects.active().filter(name=token)) or list(
            WorkerToken.objects.active().filter(prefix=token[:10])
            if token.startswith(tokens.TOKEN_PREFIX)
            else []
        )
        if len(matches) != 1:
            raise CommandError(f"{len(matches)} active tokens match {token!r}; give a unique name or prefix")
        tokens.worker_token_revoke(worker_token=matches[0], by=self._user(by))
        self.stdout.write(f"revoked {matches[0]}")

    def _list(self, **_):
        for t in WorkerToken.objects.order_by("created_at"):
            state = f"revoked {t.revoked_at:%Y-%m-%d %H:%M}" if t.revoked_at else "active"
            used = f"{t.last_used_at:%Y-%m-%d %H:%M}" if t.last_used_at else "never"
            self.stdout.write(
                f"{t.prefix}…  {t.name:<20} tenants={','.join(t.tenants)} actions={','.join(t.actions)}"
                f"  {state}  last used {used}  issued by {t.issued_by or 'unknown'}"
                f"  answers refused {t.answers_refused}"
            )
