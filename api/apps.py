from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "api"
    verbose_name = "Worker API"
    default_auto_field = "django.db.models.BigAutoField"
