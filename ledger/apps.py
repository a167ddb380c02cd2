from django.apps import AppConfig


class LedgerConfig(AppConfig):
    name = "ledger"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.conf import settings

        from ledger import actions

        actions.load_action_modules(settings.RECKON_ACTION_MODULES)
