from django.core.management.base import BaseCommand, CommandError

from ledger.archive import ArchiveInvalid
from ledger.services.retention import verify_against_checkpoints


class Command(BaseCommand):
    help = ("Verify a history archive file: every event's hash and chain link recomputed from the file "
            "alone, then its figures compared with the checkpoint recorded when it left the database.")

    def add_arguments(self, parser):
        parser.add_argument("file")
        parser.add_argument("--file-only", action="store_true",
                            help="verify the file's own hashes and chains only (no checkpoint table at hand)")

    def handle(self, *args, **options):
        try:
            verified = verify_against_checkpoints(options["file"], file_only=options["file_only"])
        except (ArchiveInvalid, OSError, ValueError) as fault:
            raise CommandError(f"{options['file']} does not verify: {fault}") from None
        header = verified.header
        self.stdout.write(self.style.SUCCESS(
            f"verify_archive: {verified.events} events of {header['partition']} ({header['range_start']} .. "
            f"{header['range_end']}): {verified.status}"))
