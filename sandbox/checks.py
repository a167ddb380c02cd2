"""With debug off, nothing starts while a demo account still has its published password.

A system check, so it runs where Django runs them: every management command (runstack, qcluster,
sweep_leases, reconcile, migrate, …), runserver, `check --deploy`, and the web server's start
(config/wsgi.py runs the checks before gunicorn serves).
"""

from django.conf import settings
from django.core.checks import Error, register
from django.db import DatabaseError, connection


@register()
def demo_passwords_left(app_configs=None, **kwargs) -> list[Error]:
    if settings.DEBUG:
        return []
    from django.contrib.auth.models import User

    from sandbox.demo_users import accounts_with_demo_passwords

    try:
        if User._meta.db_table not in connection.introspection.table_names():
            return []  # a database before its first migrate: no account at all
        accounts = accounts_with_demo_passwords()
    except DatabaseError as exc:
        return [Error(f"cannot check the accounts for demo passwords: {exc}",
                      hint="Reckon needs its database to start; check DATABASE_URL.", id="sandbox.E002")]
    if not accounts:
        return []
    return [Error(
        f"these accounts still have the demo password published in the README: {', '.join(accounts)}",
        hint="Give each a new password (python manage.py changepassword NAME) or remove it, or run with "
             "RECKON_DEBUG=true for a local demo.",
        id="sandbox.E001",
    )]
