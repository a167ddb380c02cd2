from django.core.management.base import BaseCommand

from ledger.actions import registered_actions


class Command(BaseCommand):
    help = "List every action this deployment declares: where, how it runs, and its replay policy."

    def handle(self, *args, **options):
        rows = [("action", "runs", "reversible", "queryable", "attempts", "lease", "reconciler", "declared in")]
        for action in registered_actions():
            rows.append((
                action.name,
                "external (HTTP)" if action.external else "in process",
                "yes" if action.reversible else "no: replay needs approval",
                "yes" if action.queryable else "no",
                str(action.max_attempts),
                f"{action.lease_ttl.total_seconds():g} s",
                str(action.reconciler or "none: unknowns go to a person"),
                action.source or "built in",
            ))
        guides = [(a.name, a.runbook_url, a.check_by_hand) for a in registered_actions()
                  if a.runbook_url or a.check_by_hand]
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        for row in rows:
            self.stdout.write("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
        for name, runbook_url, check_by_hand in guides:
            self.stdout.write(f"\n{name}:")
            if runbook_url:
                self.stdout.write(f"  runbook: {runbook_url}")
            for n, line in enumerate(check_by_hand.splitlines()):
                self.stdout.write(("  check by hand: " if n == 0 else " " * 17) + line)
