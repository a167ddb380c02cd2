from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from config.env import env_example, reference_markdown


def generated() -> dict[Path, str]:
    """The files written from the declarations in config/settings.py, with their contents."""
    base = Path(settings.BASE_DIR)
    return {base / "docs" / "configuration.md": reference_markdown(), base / ".env.example": env_example()}


class Command(BaseCommand):
    help = "Write docs/configuration.md and .env.example from the settings' declarations (--check: only compare)."

    def add_arguments(self, parser):
        parser.add_argument("--check", action="store_true", help="exit 1 if a file differs from the declarations")

    def handle(self, *args, check, **options):
        stale = []
        for path, text in generated().items():
            name = path.relative_to(settings.BASE_DIR)
            if path.exists() and path.read_text() == text:
                self.stdout.write(f"{name}: up to date")
            elif check:
                stale.append(str(name))
            else:
                path.write_text(text)
                self.stdout.write(f"{name}: written")
        if stale:
            raise CommandError(f"{', '.join(stale)} differ from the declarations in config/settings.py: run "
                               "`python manage.py config_reference`")
