"""django.contrib.admin with Reckon's site (console.admin_site): for superusers only."""

from django.contrib.admin.apps import AdminConfig


class ReckonAdminConfig(AdminConfig):
    default_site = "console.admin_site.ReckonAdminSite"
