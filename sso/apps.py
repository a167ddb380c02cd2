from django.apps import AppConfig


class SsoConfig(AppConfig):
    name = "sso"
    verbose_name = "Sign-in"

    def ready(self) -> None:
        from sso import admin_registrations, trail  # noqa: F401  (connects the sign-in signals; /admin/)
