"""Give a break-glass account its TOTP authenticator (allauth.mfa) and print the secret once."""

from urllib.parse import quote

from allauth.mfa.models import Authenticator
from allauth.mfa.totp.internal.auth import TOTP, generate_totp_secret
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction


class Command(BaseCommand):
    help = "Set up (or replace) the TOTP authenticator of a break-glass account; prints its secret and otpauth URI once."

    def add_arguments(self, parser):
        parser.add_argument("username")

    def handle(self, *args, username: str, **options):
        user = get_user_model()._default_manager.filter(username=username).first()
        if user is None:
            raise CommandError(f"no account {username!r}: create it in /admin/ (or `manage.py createsuperuser`) first")
        if username not in settings.RECKON_BREAK_GLASS_ACCOUNTS:
            self.stderr.write(f"note: {username} is not in RECKON_BREAK_GLASS_ACCOUNTS; add it there for the code to be asked")
        secret = generate_totp_secret()
        with transaction.atomic():
            Authenticator.objects.filter(user=user, type=Authenticator.Type.TOTP).delete()
            TOTP.activate(user, secret)
        label = quote(f"{settings.MFA_TOTP_ISSUER}:{username}")
        self.stdout.write(f"secret: {secret}\n")
        self.stdout.write(f"otpauth://totp/{label}?secret={secret}&issuer={quote(settings.MFA_TOTP_ISSUER)}\n")
