from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from ledger.services.recovery import end_recovery_windows
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
        parser.add_argument("--end-window", action="store_true",
                            help="end the open recovery window early (new keys run without a lookup again); "
                                 "holds nothing")
        parser.add_argument("--note", default="", help="why the window ends early (required with --end-window)")
        parser.add_argument("--by", default="recover", help="who ends the window (recorded)")

    def handle(self, *args, window_minutes, no_reconcile, end_window, note, by, **options):
        if end_window:
            try:
                ended = end_recovery_windows(actor=by, note=note)
            except ValueError as exc:
                raise CommandError(str(exc)) from None
            self.stdout.write(f"{len(ended)} recovery window(s) ended" if ended else "no recovery window is open")
            return
        if window_minutes < 0:
            raise CommandError("--window-minutes must not be negative")
        recovery = hold_for_recovery(window_minutes=window_minutes)
        if recovery.backup_point is None:
            self.stdout.write("the ledger is empty: nothing to recover")
            return
        self.stdout.write(
            f"backup point {recovery.backup_point.isoformat()}: {len(recovery.held)} unfinished job(s) "
            f"held for reconciliation; {len(recovery.finished_in_window)} finished job(s) touched in the "
            f"last {window_minutes} min stay finished; until {recovery.window.ends_at.isoformat()} every new "
            f"key is looked up at its provider before its first side effect"
        )
        if no_reconcile:
            return
        for decision in reconcile_until_idle():
            self.stdout.write(str(decision))
