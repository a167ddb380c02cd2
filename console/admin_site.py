"""/admin/ is for superusers only.

Django's model permissions know no tenants, and its user page lets anyone who may change users
make someone (themselves included) a superuser: a staff user with "Can view" or "Can change"
permissions would read every tenant's jobs and payloads, or grant themselves everything. People
who read the ledger do it in the console, fenced by their tenant scope (console.access); /admin/
is where superusers manage people, groups, tenant scopes, worker tokens and login locks. Every
page of it, the login included, refuses anyone else, whatever permissions they hold.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.admin import AdminSite
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import ValidationError
from django.urls import reverse


class SuperuserLoginForm(AdminAuthenticationForm):
    def confirm_login_allowed(self, user) -> None:
        super().confirm_login_allowed(user)
        if not user.is_superuser:
            raise ValidationError(self.error_messages["invalid_login"], code="invalid_login",
                                  params={"username": self.username_field.verbose_name})


class ReckonAdminSite(AdminSite):
    site_header = "Reckon administration"
    site_title = "Reckon admin"
    login_form = SuperuserLoginForm

    def has_permission(self, request) -> bool:
        return request.user.is_active and request.user.is_superuser

    def login(self, request, extra_context=None):
        # With an identity provider configured, /admin/ signs in where the console does (the
        # provider, or a break-glass account's password and TOTP code).
        if settings.RECKON_OIDC_PROVIDERS:
            return redirect_to_login(request.GET.get("next") or reverse("admin:index"))
        return super().login(request, extra_context)
