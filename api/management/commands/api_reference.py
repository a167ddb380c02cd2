"""docs/reference/openapi.json: the worker API's OpenAPI document, as /api/v1/openapi.json serves it,
for the docs site's API reference (rendered from it at build time)."""

import json
import os
import subprocess  # nosec B404  # runs this interpreter on fixed code
import sys
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

# The document lists the registered actions (an enum): it is written for Reckon alone, with no
# deployment's actions, in a process of its own so that the caller's environment changes nothing.
# api.urls is imported as the URLconf imports it: the batch and reconciliation endpoints join there.
FIXED = {"RECKON_DEBUG": "true", "RECKON_DEMO": "false", "RECKON_ACTION_MODULES": "", "RECKON_ACTIONS_FILE": "/dev/null",
         "DJANGO_SETTINGS_MODULE": "config.settings"}
EXPORT = ("import json, django; django.setup(); import api.urls; from api.views import api; "
          "print(json.dumps(api.get_openapi_schema(), indent=2, sort_keys=True, ensure_ascii=False))")


def reference_path() -> Path:
    return Path(settings.BASE_DIR) / "docs" / "reference" / "openapi.json"


def document() -> str:
    done = subprocess.run([sys.executable, "-c", EXPORT], env={**os.environ, **FIXED}, cwd=settings.BASE_DIR,  # nosec B603  # this interpreter, fixed code
                          capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise CommandError(f"the API's document could not be built:\n{done.stderr}")
    json.loads(done.stdout)
    return done.stdout


class Command(BaseCommand):
    help = "Write docs/reference/openapi.json from the worker API's schemas (--check: only compare)."

    def add_arguments(self, parser):
        parser.add_argument("--check", action="store_true", help="exit 1 if the file differs from the API")

    def handle(self, *args, check, **options):
        path, text = reference_path(), document()
        name = path.relative_to(settings.BASE_DIR)
        if path.exists() and path.read_text() == text:
            self.stdout.write(f"{name}: up to date")
        elif check:
            raise CommandError(f"{name} differs from the API's schemas: run `python manage.py api_reference`")
        else:
            path.write_text(text)
            self.stdout.write(f"{name}: written")
