import os
import sys
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import connections

from config import localdb
from sandbox.checks import demo_passwords_left
from sandbox.demo_users import ensure_demo_users
from sandbox.stack import Stack, stack_children


class Command(BaseCommand):
    help = ("Migrate, then run the web server, a django-q2 cluster, the lease sweeper and the reconciler; unless "
            "--no-demo, also the sandbox provider, a simulated workload, the demo's actions and its users "
            "(RECKON_DEBUG=true only).")

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--web-workers", type=int, default=2)
        parser.add_argument("--no-demo", action="store_true",
                            help="no sandbox provider, simulated workload, demo actions or demo users")

    def handle(self, *args, host, port, web_workers, no_demo, **options):
        demo = not no_demo
        if demo and not settings.DEBUG:
            raise CommandError("the demo (its users have published passwords) runs with RECKON_DEBUG=true only; "
                               "use --no-demo to run the stack in production mode")
        call_command("migrate", interactive=False, verbosity=0)
        users = ensure_demo_users() if demo else []
        # The system checks ran before migrate; a non-debug start looks again at the migrated accounts.
        if errors := demo_passwords_left():
            raise CommandError("\n".join(f"{error.msg}\nHINT: {error.hint}" for error in errors))
        # The children register the demo's actions (RECKON_DEMO) exactly when the demo runs.
        os.environ["RECKON_DEMO"] = "true" if demo else "false"
        cluster = localdb.started_by_this_process()
        stack = Stack(stack_children(host=host, port=port, workers=web_workers, demo=demo), out=self.stdout)
        stack.start()
        self.stdout.write(f"\nReckon is running at http://{host}:{port}/  (Ctrl-C stops everything)\n")
        if users:
            self.stdout.write("Demo logins:\n")
            for username, password, role in users:
                self.stdout.write(f"  {username:<10} {password:<20} {role}\n")
        self.stdout.flush()
        code = stack.wait()
        if cluster is not None:  # started for this run: stopped with it, unless another process uses it
            connections.close_all()
            if users := localdb.stop_unless_used():
                self.stdout.write(f"left the embedded PostgreSQL running: {_processes(users)} use it "
                                  "(a `make test`?); `make clean-db` stops it\n")
            else:
                self.stdout.write("stopped the embedded PostgreSQL\n")
        sys.exit(code)


def _processes(pids: list[int]) -> str:
    """'process 812 (python -m pytest)': who holds the cluster, as far as /proc tells."""
    named = []
    for pid in pids:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            command = " ".join(Path(argv[0].decode()).name if i == 0 else a.decode()
                               for i, a in enumerate(argv[:3]) if a)
        except (OSError, IndexError):
            command = ""
        named.append(f"process {pid} ({command})" if command else f"process {pid}")
    return ", ".join(named) if pids != [0] else "other processes"
