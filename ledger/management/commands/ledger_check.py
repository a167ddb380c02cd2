from django.core.management.base import BaseCommand, CommandError

from ledger.invariants import find_violations


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
        if broken:
            raise CommandError(f"{len(broken)} invariant(s) violated: {', '.join(f.check for f in broken)}")
        self.stdout.write(self.style.SUCCESS(f"ledger_check: all {len(findings)} invariants hold"))
