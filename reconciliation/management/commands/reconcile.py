import time

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from ledger.declarations import reconciler_problems
from ledger.loops import run_passes
from reconciliation.passes import reconcile_until_idle


class Command(BaseCommand):
    help = "Look up unknown work at its providers and apply what was found."

    def add_arguments(self, parser):
        mode = parser.add_mutually_exclusive_group()
        mode.add_argument("--once", action="store_true", help="one pass over the due jobs (the default)")
        mode.add_argument("--loop", action="store_true", help="keep reconciling every --interval seconds")
        parser.add_argument("--interval", type=float, default=settings.RECKON_RECONCILE_INTERVAL)
        parser.add_argument(
            "--limit", type=int, default=settings.RECKON_RECONCILE_BATCH, help="jobs per batch"
        )

    def handle(self, *args, once, loop, interval, limit, **options):
        if limit < 1:
            raise CommandError("--limit must be at least 1")
        # This process signs every webhook question it asks and calls the MCP upstreams it looks up.
        if problems := reconciler_problems():
            raise CommandError("\n".join(problems))
        if not loop:
            self._pass(reconcile_until_idle(limit=limit), time.monotonic(), loop=False)
            return
        self.stdout.write(f"reconciling unknown work every {interval} s")
        run_passes("reconciler", interval=interval, step=lambda: reconcile_until_idle(limit=limit),
                   on_pass=lambda decisions, started, outage: self._pass(decisions, started, loop=True))

    def _pass(self, decisions, started: float, *, loop: bool) -> None:
        for decision in decisions:
            self.stdout.write(str(decision))
        if decisions or not loop:
            elapsed = time.monotonic() - started
            rate = len(decisions) / elapsed if elapsed > 0 else 0.0
            self.stdout.write(f"reconciled {len(decisions)} job(s) in {elapsed:.2f} s ({rate:.0f}/s)")
