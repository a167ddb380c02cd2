from django.core.management.base import BaseCommand, CommandError

from ledger.invariants import find_violations
from ledger.models import HistoryCheckpoint
from ledger.partitions import covered_until, partitions


def history_line() -> str:
    """Which periods the checks above covered: the online partitions, after the archived ones."""
    online = partitions()
    latest = HistoryCheckpoint.objects.order_by("-range_end").first()
    until = covered_until()
    text = (f"history: online from {online[0].start:%Y-%m-%d %H:%M} UTC" if online else "history: no partition online")
    text += f", partitions ready until {until:%Y-%m-%d %H:%M} UTC" if until else ", NO partition holds the present"
    if latest:
        text += (f"; {HistoryCheckpoint.objects.count()} period(s) archived, the chains verified from the "
                 f"checkpoint of {latest.partition} ({len(latest.carried)} job(s) carried on)")
    return text


class Command(BaseCommand):
    help = "Verify the ledger's invariants over the whole database; exit 1 on any violation."

    def handle(self, *args, **options):
        findings = find_violations()
        broken = [f for f in findings if f.count]
        for finding in findings:
            mark = "FAIL" if finding.count else "ok"
            self.stdout.write(f"{mark:>4}  {finding.check:<30} {finding.count:>7}  {finding.description}")
            for example in finding.examples:
                self.stdout.write(f"          e.g. {example}")
        self.stdout.write(history_line())
        if broken:
            raise CommandError(f"{len(broken)} invariant(s) violated: {', '.join(f.check for f in broken)}")
        self.stdout.write(self.style.SUCCESS(f"ledger_check: all {len(findings)} invariants hold"))
