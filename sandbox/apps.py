from django.apps import AppConfig


class SandboxConfig(AppConfig):
    name = "sandbox"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from sandbox import checks  # noqa: F401  (registers the demo password check)
