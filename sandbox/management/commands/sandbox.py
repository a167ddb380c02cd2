"""``python manage.py sandbox``: run the sandbox provider in the foreground."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from sandbox.faults import FaultError
from sandbox.ratelimit import parse_cli
from sandbox.server import DEFAULT_DB, DEFAULT_PORT, build_server, serve


class Command(BaseCommand):
    help = (
        "Run the sandbox provider (billing, mail, publish target, vault) as a real HTTP server "
        "with its own SQLite store. Stops cleanly on SIGINT/SIGTERM."
    )
    requires_system_checks = []  # the provider needs neither Reckon's database nor its models

    def add_arguments(self, parser) -> None:
        parser.add_argument("--host", default="127.0.0.1", help="address to bind (127.0.0.1)")
        parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port ({DEFAULT_PORT})")
        parser.add_argument("--db", default=str(DEFAULT_DB),
                            help=f"the provider's SQLite file ({DEFAULT_DB})")
        parser.add_argument("--fault-rate", type=float, default=0.0,
                            help="fault probability per effect, split evenly over error_5xx, "
                                 "fail_before_commit and drop_after_commit")
        parser.add_argument("--seed", type=int, default=None, help="seed of the fault draws")
        parser.add_argument("--latency-ms", type=float, default=0.0,
                            help="the provider's round trip: every lookup and effect waits this long (0)")
        parser.add_argument("--rate-limit", action="append", default=[], metavar="PREFIX=N",
                            help="answer 429 with Retry-After above N requests/s on a path prefix"
                                 " (/invoices) or, as '*=N', on all others; repeatable")

    def handle(self, *args, **options) -> None:
        try:
            server = build_server(options["host"], options["port"], options["db"],
                                  options["fault_rate"], options["seed"], options["latency_ms"],
                                  parse_cli(options["rate_limit"]))
        except FaultError as exc:
            raise CommandError(str(exc)) from None
        except OSError as exc:
            raise CommandError(
                f"cannot listen on {options['host']}:{options['port']}: {exc}") from None
        self.stdout.write(f"Sandbox provider listening on {server.url} "
                          f"(store: {server.app.store.path})")
        self.stdout.flush()
        serve(server)
        self.stdout.write("Sandbox provider stopped")
