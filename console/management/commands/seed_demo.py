from django.core.management.base import BaseCommand

from console.demo_users import ensure_demo_users


class Command(BaseCommand):
    help = "Create the role groups and the demo users (local demos only: the passwords are printed)."

    def handle(self, *args, **options):
        for username, password, role in ensure_demo_users():
            self.stdout.write(f"  {username:<10} {password:<20} {role}")
