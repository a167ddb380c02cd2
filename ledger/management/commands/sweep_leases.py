import time

from django.conf import settings
from django.core.management.base import BaseCommand

from ledger.availability import Outage, through_outage
from ledger.cluster import cluster_problem
from ledger.loops import run_passes
from ledger.services import sweep_expired_leases


class Command(BaseCommand):
    help = "Handle expired leases: reclaim work that never started, mark submitted work unknown."

    def add_arguments(self, parser):
        parser.add_argument("--loop", action="store_true", help="keep sweeping every --interval seconds")
        parser.add_argument("--interval", type=float, default=settings.RECKON_SWEEP_INTERVAL)

    def handle(self, *args, loop, interval, **options):
        if not loop:
            self._sweep(sweep_expired_leases(), loop=False)
            return
        self.stdout.write(f"sweeping expired leases every {interval} s")
        run_passes("sweeper", interval=interval, step=sweep_expired_leases,
                   on_pass=lambda result, started, outage: self._sweep(result, loop=True, started=started,
                                                                       outage=outage))

    missing_cluster: str | None = None

    def _sweep(self, result, *, loop: bool, started: float | None = None, outage: Outage | None = None) -> None:
        started = time.monotonic() if started is None else started
        if loop:
            problem = through_outage(cluster_problem, outage)
            if problem != self.missing_cluster:  # said when it starts and ends
                self.stderr.write(f"warning: {problem}" if problem else "a qcluster runs the schedules again")
                self.missing_cluster = problem
        if result.total or not loop:
            self.stdout.write(
                f"swept {result.total} expired lease(s) in "
                f"{(time.monotonic() - started) * 1000:.1f} ms: "
                f"{len(result.reclaimed)} reclaimed, {len(result.unknown)} unknown, "
                f"{len(result.exhausted)} exhausted, {len(result.retried)} retries due dispatched, "
                f"{len(result.redispatched)} stranded jobs redispatched"
            )
