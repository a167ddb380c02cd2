"""The `reckon` command (installed with the package) and manage.py: Django's management commands.

A configuration error — a bad actions file, a missing secret, an unset variable — is printed as
its one message, naming what to fix, instead of a traceback.
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str] | None = None) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        execute_from_command_line(argv or sys.argv)
    except ImproperlyConfigured as refused:
        sys.exit(configuration_error(refused))


def configuration_error(refused: Exception) -> str:
    """The one line (or paragraph) a refused start prints."""
    return f"Reckon cannot start: {refused}"


if __name__ == "__main__":
    main()
