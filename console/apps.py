from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    name = "console"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from console import shift  # noqa: F401  # connects the sign-out receiver
