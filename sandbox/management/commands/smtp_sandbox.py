"""``python manage.py smtp_sandbox``: run the SMTP sandbox in the foreground."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from sandbox.smtp.faults import FaultError
from sandbox.smtp.server import add_arguments, build


class Command(BaseCommand):
    help = (
        "Run the SMTP sandbox: a real SMTP server (aiosmtpd) that archives every message it accepts in "
        "SQLite, with a read-only lookup API (GET /messages?message_id=) and injected faults. Stops cleanly "
        "on SIGINT/SIGTERM."
    )
    requires_system_checks = []  # the server needs neither Reckon's database nor its models

    def add_arguments(self, parser) -> None:
        add_arguments(parser)

    def handle(self, *args, **options) -> None:
        try:
            sandbox = build(options)
        except FaultError as exc:
            raise CommandError(str(exc)) from None
        except OSError as exc:
            raise CommandError(f"cannot listen on {options['host']} (SMTP port {options['port']}, "
                               f"lookup port {options['http_port']}): {exc}") from None
        self.stdout.write(f"SMTP sandbox: SMTP on {sandbox.smtp_address}, lookup API on {sandbox.http_url} "
                          f"(archive: {sandbox.archive.path})")
        self.stdout.flush()
        sandbox.serve()
        self.stdout.write("SMTP sandbox stopped")
