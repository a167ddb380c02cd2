from django.apps import AppConfig


class LedgerConfig(AppConfig):
    name = "ledger"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.conf import settings

        from ledger import actions, checks, declarations  # noqa: F401  (checks: registers the system checks)

        actions.load_action_modules(settings.RECKON_ACTION_MODULES)
        declarations.load_actions_file(settings.RECKON_ACTIONS_FILE, required=settings.RECKON_ACTIONS_FILE_REQUIRED)
