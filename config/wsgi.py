import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
application = get_wsgi_application()


def _refuse_to_serve_on_failed_checks() -> None:
    """Run Django's system checks as runserver and every management command do: gunicorn does
    not, and a web process must not serve while one fails (a demo password left with debug off)."""
    from django.core import checks
    from django.core.exceptions import ImproperlyConfigured

    failed = [m for m in checks.run_checks() if m.is_serious() and not m.is_silenced()]
    if failed:
        raise ImproperlyConfigured("refusing to serve:\n" + "\n".join(str(m) for m in failed))


_refuse_to_serve_on_failed_checks()
