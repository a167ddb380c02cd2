from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "api"
    verbose_name = "Worker API"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from api import tokens
        from approvals import foureyes

        # Four eyes excludes the issuers of the tokens whose workers or agents wrote into a job's
        # history (and the reconciler's requests name the one that began the attempt); approvals is
        # below this app, so this app lends the lookup.
        foureyes.token_issuer.register(tokens.issuer_of)
