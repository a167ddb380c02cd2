import sys

from django.core.management import call_command
from django.core.management.base import BaseCommand

from console.demo_users import ensure_demo_users
from console.stack import Stack, stack_children


class Command(BaseCommand):
    help = ("Migrate, seed the demo users, then run the web server, a django-q2 cluster, the lease sweeper, "
            "and (unless --no-demo) the sandbox provider with a simulated workload.")

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--web-workers", type=int, default=2)
        parser.add_argument("--no-demo", action="store_true",
                            help="no sandbox provider and no simulated workload (real providers only)")

    def handle(self, *args, host, port, web_workers, no_demo, **options):
        call_command("migrate", interactive=False, verbosity=0)
        users = ensure_demo_users()
        stack = Stack(stack_children(host=host, port=port, workers=web_workers, demo=not no_demo), out=self.stdout)
        stack.start()
        self.stdout.write(f"\nReckon is running at http://{host}:{port}/  (Ctrl-C stops everything)\n")
        self.stdout.write("Demo logins:\n")
        for username, password, role in users:
            self.stdout.write(f"  {username:<10} {password:<20} {role}\n")
        self.stdout.flush()
        sys.exit(stack.wait())
