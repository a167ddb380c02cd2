"""Admins create and revoke worker tokens here; a new token is shown once, in a message.

Issuing and revoking go through `api.tokens`, which records each in the admin trail (/audit/)
and the issuer on the token."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages

from api import tokens
from api.models import ALL, WorkerToken


class WorkerTokenForm(forms.ModelForm):
    tenants_text = forms.CharField(label="Tenants", help_text=f"Comma-separated; {ALL} for all.")
    actions_text = forms.CharField(label="Actions", help_text=f"Comma-separated; {ALL} for all.")

    class Meta:
        model = WorkerToken
        fields = ["name"]

    def _scope(self, name: str) -> list[str]:
        try:
            return tokens.clean_scope(name, self.cleaned_data[f"{name}s_text"].split(","))
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean_tenants_text(self):
        return self._scope("tenant")

    def clean_actions_text(self):
        return self._scope("action")


@admin.register(WorkerToken)
class WorkerTokenAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "prefix",
        "tenants",
        "actions",
        "issued_by",
        "created_at",
        "last_used_at",
        "revoked_at",
        "answers_refused",
    ]
    list_filter = [("revoked_at", admin.EmptyFieldListFilter)]
    search_fields = ["name", "prefix"]
    readonly_fields = [
        "name",
        "prefix",
        "tenants",
        "actions",
        "created_by",
        "issued_by",
        "created_at",
        "last_used_at",
        "revoked_at",
        "answers_refused",
    ]
    actions = ["revoke"]

    def get_form(self, request, obj=None, **kwargs):
        if obj is None:
            kwargs["form"] = WorkerTokenForm
        return super().get_form(request, obj, **kwargs)

    def get_readonly_fields(self, request, obj=None):
        return self.readonly_fields if obj is not None else []

    def get_fields(self, request, obj=None):
        return ["name", "tenants_text", "actions_text"] if obj is None else self.readonly_fields

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # revoke instead: the row shows who had access, and until when

    def save_model(self, request, obj, form, change):
        if change:
            return  # a token's scope never changes; issue a new one
        issued = tokens.worker_token_create(
            name=form.cleaned_data["name"],
            tenants=form.cleaned_data["tenants_text"],
            actions=form.cleaned_data["actions_text"],
            created_by=request.user,
        )
        obj.pk = issued.worker_token.pk
        obj.refresh_from_db()
        messages.warning(
            request,
            f"Token for {obj.name}: {issued.token} — copy it now; it is not stored and will not be shown again.",
        )

    @admin.action(description="Revoke selected tokens")
    def revoke(self, request, queryset):
        for worker_token in queryset.active():
            tokens.worker_token_revoke(worker_token=worker_token, by=request.user)
        self.message_user(request, "Revoked.")
