from datetime import UTC, datetime

from django.core.management.base import BaseCommand

from ledger.models import HistoryCheckpoint
from ledger.partitions import covered_until, ensure_ahead, partitions


class Command(BaseCommand):
    help = ("Create the event history's partitions ahead of time (RECKON_HISTORY_PARTITIONS_AHEAD; also run "
            "after every migrate and hourly by the cluster's schedule) and list what is online and archived.")

    def add_arguments(self, parser):
        parser.add_argument("--list", action="store_true", help="only list, create nothing")

    def handle(self, *args, **options):
        made = [] if options["list"] else ensure_ahead()
        for name in made:
            self.stdout.write(f"created {name}")
        for checkpoint in HistoryCheckpoint.objects.all():
            self.stdout.write(f"archived  {checkpoint.range_start:%Y-%m-%d %H:%M} .. {checkpoint.range_end:%Y-%m-%d %H:%M}"
                              f"  {checkpoint.events:>10} events  {checkpoint.archive_file}")
        for partition in partitions():
            self.stdout.write(f"online    {partition.start:%Y-%m-%d %H:%M} .. {partition.end:%Y-%m-%d %H:%M}  {partition.name}")
        until = covered_until(datetime.now(UTC))
        self.stdout.write(f"events can be written until {until:%Y-%m-%d %H:%M} UTC" if until
                          else self.style.ERROR("no partition holds the present: events cannot be written"))
