from django.apps import AppConfig


class LedgerConfig(AppConfig):
    name = "ledger"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.conf import settings
        from django.db.backends.signals import connection_created
        from django.db.models.signals import post_migrate

        from ledger import actions, checks, declarations, rewind  # noqa: F401  (checks: registers the system checks)

        actions.load_action_modules(settings.RECKON_ACTION_MODULES)
        declarations.load_actions_file(settings.RECKON_ACTIONS_FILE, required=settings.RECKON_ACTIONS_FILE_REQUIRED)
        post_migrate.connect(_partitions_ahead, sender=self, dispatch_uid="reckon.partitions_ahead")
        connection_created.connect(rewind.on_new_connection, dispatch_uid="reckon.ledger_watch")


def _partitions_ahead(sender, using="default", **kwargs) -> None:
    """After every migrate: the event table's partitions from now to the configured days ahead."""
    from django.db import connections

    from ledger.partitions import EVENTS, ensure_ahead

    with connections[using].cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_partitioned_table WHERE partrelid = to_regclass(%s)", [EVENTS])
        if cursor.fetchone():
            ensure_ahead()
