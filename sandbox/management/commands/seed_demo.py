from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from sandbox.demo_users import ensure_demo_users


class Command(BaseCommand):
    help = ("Create the role groups and the demo users that do not exist yet (local demos only: RECKON_DEBUG=true; "
            "the passwords are printed, and existing accounts are left as they are).")

    def handle(self, *args, **options):
        if not settings.DEBUG:
            raise CommandError("the demo users have published passwords: they are created with RECKON_DEBUG=true "
                               "only (create real accounts with `python manage.py createsuperuser`)")
        for username, password, role in ensure_demo_users():
            self.stdout.write(f"  {username:<10} {password:<20} {role}")
