import time

from django.core.management.base import BaseCommand, CommandError

from bench.generate import generate
from ledger.invariants import find_violations


class Command(BaseCommand):
    help = "Fill the ledger with a realistic generated history (COPY); for benchmarks and console demos at scale."

    def add_arguments(self, parser):
        parser.add_argument("--attempts", type=int, default=1_000_000)
        parser.add_argument("--queued", type=int, default=10_000, help="jobs left in the unknown-work queue")
        parser.add_argument("--prefix", default="gen")
        parser.add_argument("--check", action="store_true", help="run ledger_check's queries afterwards")

    def handle(self, *args, attempts, queued, prefix, check, **options):
        if attempts < 1 or queued < 0:
            raise CommandError("--attempts must be positive and --queued not negative")
        started = time.monotonic()
        made = generate(attempts=attempts, queued=queued, prefix=prefix)
        elapsed = time.monotonic() - started
        self.stdout.write(f"generated {made.jobs} jobs, {made.attempts} attempts, {made.events} events "
                          f"({made.queued} in the queue) in {elapsed:.1f} s = {made.attempts / elapsed:,.0f} attempts/s "
                          f"({', '.join(f'{name} {seconds} s' for name, seconds in made.phases.items())})")
        if check:
            broken = [f for f in find_violations() if f.count]
            if broken:
                raise CommandError(f"generated history violates: {', '.join(f.check for f in broken)}")
            self.stdout.write("ledger_check: all invariants hold")
