from django.apps import AppConfig


class ReconciliationConfig(AppConfig):
    name = "reconciliation"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from ledger import hooks
        from reconciliation import providers, tasks

        # The ledger imports nothing above it: it reaches this app through these hooks.
        hooks.reconciliation_due.register(tasks.queue_pass)
        hooks.provider_called.register(providers.publish)
