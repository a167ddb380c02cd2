import time

from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import close_old_connections

from ledger.cluster import cluster_problem
from ledger.loops import beating
from ledger.services import sweep_expired_leases


class Command(BaseCommand):
    help = "Handle expired leases: reclaim work that never started, mark submitted work unknown."

    def add_arguments(self, parser):
        parser.add_argument("--loop", action="store_true", help="keep sweeping every --interval seconds")
        parser.add_argument("--interval", type=float, default=settings.RECKON_SWEEP_INTERVAL)

    def handle(self, *args, loop, interval, **options):
        if not loop:
            self._sweep(loop=False)
            return
        self.stdout.write(f"sweeping expired leases every {interval} s")
        with beating("sweeper", interval=interval) as beat:
            while True:
                self._sweep(loop=True)
                beat()  # this process's own pass: the stalled-loop alert watches it
                close_old_connections()
                time.sleep(interval)  # the loop's pacing, not synchronisation

    missing_cluster: str | None = None

    def _sweep(self, *, loop: bool) -> None:
        started = time.monotonic()
        result = sweep_expired_leases()
        if loop and (problem := cluster_problem()) != self.missing_cluster:  # said when it starts and ends
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
