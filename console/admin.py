"""/admin/: the ledger's tables, read-only for everyone. History changes only through services."""

from django.contrib import admin

from approvals.models import ApprovalRequest
from ledger.models import Attempt, Job, LedgerEvent
from reconciliation.models import ReconciliationCheck


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Job)
class JobAdmin(ReadOnlyAdmin):
    list_display = ("job_id", "tenant", "action", "status", "created_at", "updated_at")
    list_filter = ("status", "action")
    search_fields = ("=job_id", "=idempotency_key", "=tenant")
    show_full_result_count = False


@admin.register(Attempt)
class AttemptAdmin(ReadOnlyAdmin):
    list_display = (
        "job",
        "number",
        "delivery_state",
        "execution_state",
        "side_effect_state",
        "lease_owner",
        "lease_token",
        "version",
    )
    list_filter = ("execution_state", "side_effect_state", "delivery_state")
    list_select_related = ("job",)
    search_fields = ("=job__job_id",)
    show_full_result_count = False


@admin.register(LedgerEvent)
class LedgerEventAdmin(ReadOnlyAdmin):
    list_display = ("id", "at", "job", "attempt", "actor_type", "actor", "kind")
    list_filter = ("actor_type",)
    list_select_related = ("job", "attempt")
    search_fields = ("=job__job_id", "=actor", "=kind")
    show_full_result_count = False


@admin.register(ReconciliationCheck)
class ReconciliationCheckAdmin(ReadOnlyAdmin):
    list_display = ("id", "checked_at", "job", "reconciler", "outcome", "duration_ms")
    list_filter = ("outcome",)
    list_select_related = ("job",)
    search_fields = ("=job__job_id",)
    show_full_result_count = False


@admin.register(ApprovalRequest)
class ApprovalRequestAdmin(ReadOnlyAdmin):
    list_display = ("id", "job", "status", "requested_by_actor", "decided_by", "created_at", "expires_at")
    list_filter = ("status",)
    list_select_related = ("job", "decided_by")
    search_fields = ("=job__job_id",)
    show_full_result_count = False
