import time

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import close_old_connections

from alerts.evaluate import channels_configured, evaluate_alerts
from ledger.availability import Outage, through_outage


class Command(BaseCommand):
    help = ("Evaluate the alert conditions and notify the configured channels; with --loop, every --interval "
            "seconds. A process of its own, so that an alert about Reckon's own loops (the dead-man gate "
            "closed) still goes out when the qcluster, the sweeper and the reconciler have stopped.")

    def add_arguments(self, parser):
        parser.add_argument("--loop", action="store_true", help="keep evaluating every --interval seconds")
        parser.add_argument("--interval", type=float, default=settings.RECKON_WATCHDOG_INTERVAL)

    def handle(self, *args, loop, interval, **options):
        if interval <= 0:
            raise CommandError("--interval must be positive")
        if not channels_configured():
            self.stdout.write("no alert channel (RECKON_ALERT_WEBHOOK_URL, RECKON_ALERT_EMAILS): conditions are "
                              "recorded for the console's alerts page, nothing is sent")
        if loop:
            self.stdout.write(f"evaluating the alert conditions every {interval} s")
        outage = Outage("watchdog")  # a failover: the loop waits it out, it does not exit
        while True:
            for notified in (through_outage(evaluate_alerts, outage) or []) if loop else evaluate_alerts():
                self.stdout.write(f"{'FIRING' if notified.firing else 'RESOLVED'} {notified.condition}: "
                                  f"sent by {', '.join(notified.channels) or 'no channel'}")
            self.stdout.flush()
            if not loop:
                return
            close_old_connections()
            time.sleep(interval)  # the loop's pacing, not synchronisation
