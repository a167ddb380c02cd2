from django.core.management.base import BaseCommand

from ledger.services.retention import archive_dir, run_retention_pass


class Command(BaseCommand):
    help = ("The retention pass: write each expired partition of the event history to an archive file "
            "(RECKON_HISTORY_ARCHIVE_DIR), record its checkpoint and tombstones, and drop it; oldest first, "
            "stopping at the first partition that is not expired or holds a job that is not finished.")

    def add_arguments(self, parser):
        parser.add_argument("--limit", type=int, default=None, help="archive at most this many partitions")

    def handle(self, *args, **options):
        result = run_retention_pass(limit=options["limit"])
        for checkpoint in result.archived:
            again = f" (and {len(checkpoint.archived_again)} archived again)" if checkpoint.archived_again else ""
            self.stdout.write(f"archived {checkpoint.partition}: {checkpoint.events} events of {checkpoint.jobs} jobs, "
                              f"{checkpoint.tombstones.count()} jobs left the database{again} -> "
                              f"{checkpoint.archive_file}")
            for sentence in checkpoint.archived_again:
                self.stdout.write(self.style.WARNING(f"  {sentence}"))
        if result.stopped:
            self.stdout.write(f"stopped at {result.stopped}")
        self.stdout.write(self.style.SUCCESS(f"archive_history: {len(result.archived)} partition(s) archived "
                                             f"into {archive_dir()}"))
