"""`manage.py worker_token create|revoke|list`: issue and withdraw worker API tokens."""

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
        revoke = sub.add_parser("revoke", help="revoke by name or prefix")
        revoke.add_argument("token", help="the token's name or its prefix (rk_…)")
        sub.add_parser("list", help="every token with its scope and state")

    def handle(self, *args, command, **options):
        getattr(self, f"_{command}")(**options)

    def _create(self, *, name, tenant, action, **_):
        try:
            issued = tokens.worker_token_create(name=name, tenants=tenant, actions=action)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        self.stderr.write(f"created {issued.worker_token}; the token is shown once, store it now:")
        self.stdout.write(issued.token)

    def _revoke(self, *, token, **_):
        matches = list(WorkerToken.objects.active().filter(name=token)) or list(
            WorkerToken.objects.active().filter(prefix=token[:10])
            if token.startswith(tokens.TOKEN_PREFIX)
            else []
        )
        if len(matches) != 1:
            raise CommandError(f"{len(matches)} active tokens match {token!r}; give a unique name or prefix")
        tokens.worker_token_revoke(worker_token=matches[0])
        self.stdout.write(f"revoked {matches[0]}")

    def _list(self, **_):
        for t in WorkerToken.objects.order_by("created_at"):
            state = f"revoked {t.revoked_at:%Y-%m-%d %H:%M}" if t.revoked_at else "active"
            used = f"{t.last_used_at:%Y-%m-%d %H:%M}" if t.last_used_at else "never"
            self.stdout.write(
                f"{t.prefix}…  {t.name:<20} tenants={','.join(t.tenants)} actions={','.join(t.actions)}"
                f"  {state}  last used {used}"
            )
