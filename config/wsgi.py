"""The web processes' entry point: `gunicorn config.wsgi:application`.

A configuration error (a bad actions file, a missing secret) or a failed system check stops the
start with its one message on stderr, not a traceback; the exit status 4 is gunicorn's "App failed
to load", which stops its master instead of booting workers again and again.
"""

import os
import sys

from django.core.exceptions import ImproperlyConfigured

from config.cli import configuration_error

APP_LOAD_ERROR = 4  # gunicorn.arbiter.Arbiter.APP_LOAD_ERROR

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")


def _load():
    from django.core.wsgi import get_wsgi_application

    loaded = get_wsgi_application()
    _refuse_to_serve_on_failed_checks()
    return loaded


def _refuse_to_serve_on_failed_checks() -> None:
    """Run Django's system checks as runserver and every management command do: gunicorn does
    not, and a web process must not serve while one fails (a demo password left with debug off).
    Warnings are printed, as a management command prints them."""
    from django.core import checks

    found = [m for m in checks.run_checks() if not m.is_silenced()]
    for warning in (m for m in found if not m.is_serious()):
        print(f"warning: {warning}", file=sys.stderr, flush=True)
    failed = [m for m in found if m.is_serious()]
    if failed:
        raise ImproperlyConfigured("refusing to serve:\n" + "\n".join(str(m) for m in failed))


try:
    application = _load()
except ImproperlyConfigured as refused:
    print(configuration_error(refused), file=sys.stderr, flush=True)
    sys.exit(APP_LOAD_ERROR)
