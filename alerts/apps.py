from django.apps import AppConfig


class AlertsConfig(AppConfig):
    name = "alerts"
    verbose_name = "Alerts and sampled levels"
    default_auto_field = "django.db.models.BigAutoField"
