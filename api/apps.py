from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "api"
    verbose_name = "Worker API"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from api import tokens
        from reconciliation import resolution

        # The reconciler's approval requests name the issuer of the token that began the attempt
        # (four eyes excludes them); resolution is below this app, so this app lends the lookup.
        resolution.token_issuer.register(tokens.issuer_of)
