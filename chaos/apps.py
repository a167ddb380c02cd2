from django.apps import AppConfig


class ChaosConfig(AppConfig):
    name = "chaos"
    default_auto_field = "django.db.models.BigAutoField"
