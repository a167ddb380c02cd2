from django.apps import AppConfig


class ReconciliationConfig(AppConfig):
    name = "reconciliation"
    default_auto_field = "django.db.models.BigAutoField"
