from django.core.management.base import BaseCommand, CommandError

from ledger.archive import ArchiveInvalid
from ledger.services.retention import RESTORED_SCHEMA, restore_archive


class Command(BaseCommand):
    help = (f"Bring an archived period back for an investigation, read-only: the file is verified (against its "
            f"checkpoint, unless --file-only), then its "
            f"events and jobs are loaded into tables of the schema {RESTORED_SCHEMA} (the live ledger is not "
            "touched; `--drop` removes them again).")

    def add_arguments(self, parser):
        parser.add_argument("file")
        parser.add_argument("--drop", action="store_true", help="remove what an earlier restore of this file loaded")
        parser.add_argument("--file-only", action="store_true",
                            help="verify the file alone (no checkpoint table at hand); the restored tables say so")

    def handle(self, *args, **options):
        try:
            table, events, status = restore_archive(options["file"], drop=options["drop"],
                                                    file_only=options["file_only"])
        except (ArchiveInvalid, OSError, ValueError) as fault:
            raise CommandError(f"{options['file']} not restored: {fault}") from None
        if options["drop"]:
            self.stdout.write(self.style.SUCCESS(f"restore_archive: {table} dropped"))
        else:
            self.stdout.write(self.style.SUCCESS(
                f"restore_archive: {events} events in {table} (read-only), its jobs in {table}_jobs; {status}"))
