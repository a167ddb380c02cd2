from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from reconciliation.passes import reconcile_until_idle
from reconciliation.recovery import hold_for_recovery


class Command(BaseCommand):
    help = (
        "After the ledger was restored from a backup: hold every unfinished job until "
        "reconciliation has looked it up at its provider, then run a reconciliation pass."
    )

    def add_arguments(self, parser):
        parser.add_argument("--window-minutes", type=int, default=settings.RECKON_RECOVERY_WINDOW_MINUTES)
        parser.add_argument("--no-reconcile", action="store_true", help="only hold the jobs")

    def handle(self, *args, window_minutes, no_reconcile, **options):
        if window_minutes < 0:
            raise CommandError("--window-minutes must not be negative")
        recovery = hold_for_recovery(window_minutes=window_minutes)
        if recovery.backup_point is None:
            self.stdout.write("the ledger is empty: nothing to recover")
            return
        self.stdout.write(
            f"backup point {recovery.backup_point.isoformat()}: {len(recovery.held)} unfinished job(s) "
            f"held for reconciliation; {len(recovery.finished_in_window)} finished job(s) touched in the "
            f"last {window_minutes} min stay finished"
        )
        if no_reconcile:
            return
        for decision in reconcile_until_idle():
            self.stdout.write(str(decision))
