from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = ("Serve the MCP gateway over Streamable HTTP (stateless): agents' tool calls go through Reckon "
            "to the upstreams the actions file declares.")

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8300)
        parser.add_argument("--allowed-host", action="append", default=[], dest="allowed_hosts",
                            help="A Host header to accept (host:port, or host:* for any port); repeatable. "
                                 "Others are answered 421 (DNS rebinding guard). Default: the --host and localhost.")

    def handle(self, *args, host: str, port: int, allowed_hosts: list[str], **options):
        import uvicorn

        from gateway.config import missing_variables
        from gateway.server import build_app, no_upstreams_reason

        if problems := missing_variables():  # never an empty header or env sent in a secret's place
            raise CommandError("\n".join(problems))

        allowed = allowed_hosts or sorted({f"{host}:*", "127.0.0.1:*", "localhost:*"})
        reason = no_upstreams_reason()
        self.stdout.write(f"MCP gateway on http://{host}:{port}/mcp" + (f": {reason}" if reason else ""), ending="\n")
        self.stdout.flush()
        uvicorn.run(build_app(allowed_hosts=allowed), host=host, port=port, log_level="warning",
                    access_log=False, lifespan="on")
