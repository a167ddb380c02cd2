"""/admin/ (superusers only: console.admin_site): the ledger's tables and django-q2's tasks and
schedules, read-only (history changes only through services; schedules come from
config/schedules.py); what stays writable, each change written to the admin trail in the same
transaction: people, groups, tenant scopes, worker tokens (api/admin.py, through api.tokens) and
the deletion of a login attempt (which lifts a lock-out)."""

from axes.admin import AccessAttemptAdmin, AccessFailureLogAdmin, AccessLogAdmin
from axes.models import AccessAttempt, AccessFailureLog, AccessLog
from django.contrib import admin
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group, User
from django.db import transaction
from django_q.admin import FailAdmin, QueueAdmin, ScheduleAdmin, TaskAdmin
from django_q.models import Failure, OrmQ, Schedule, Success

from approvals.models import ApprovalRequest
from console.admin_trail import record_change, snapshot
from console.models import AdminAuditEntry, TenantScope
from ledger.models import Attempt, Job, LedgerEvent
from reconciliation.models import ReconciliationCheck


class ReadOnlyAdmin(admin.ModelAdmin):
    actions = ()  # none of a library's own actions (delete_selected needs the delete permission)

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


@admin.register(AdminAuditEntry)
class AdminAuditEntryAdmin(ReadOnlyAdmin):
    list_display = ("id", "at", "actor", "action", "object_type", "object_repr")
    list_filter = ("action", "object_type")
    search_fields = ("=actor", "=object_repr")


# -- django-q2: what ran, what failed, what is queued and scheduled; read-only ----------------------
# Its own admin lets a schedule or a queued task name any importable callable (os.system runs as
# the cluster's user) and resubmits tasks outside the ledger. The schedules are installed from
# config/schedules.py by migrate; the tasks are the ledger's to queue.


def _read_only(model, library_admin) -> None:
    if admin.site.is_registered(model):
        admin.site.unregister(model)
    admin.site.register(model, type(f"ReadOnly{library_admin.__name__}", (ReadOnlyAdmin, library_admin), {}))


_read_only(Schedule, ScheduleAdmin)
_read_only(Success, TaskAdmin)
_read_only(Failure, FailAdmin)
_read_only(OrmQ, QueueAdmin)


# -- the writable part, every change on the admin trail ------------------------------------------


class AuditedAdmin(admin.ModelAdmin):
    """Writes every addition, change and deletion made here to the admin trail, in the same
    transaction: the state before (taken when the object is loaded for a POST) and after."""

    def audit_snapshot(self, obj) -> dict:
        return snapshot(obj)

    def get_object(self, request, object_id, from_field=None):
        obj = super().get_object(request, object_id, from_field)
        if obj is not None and request.method == "POST":
            obj._audit_before = self.audit_snapshot(obj)
        return obj

    def save_model(self, request, obj, form, change) -> None:
        if change and not hasattr(obj, "_audit_before"):  # e.g. a list_editable save
            obj._audit_before = self.audit_snapshot(type(obj)._default_manager.get(pk=obj.pk))
        super().save_model(request, obj, form, change)

    def log_addition(self, request, obj, message):
        entry = super().log_addition(request, obj, message)
        record_change(request.user, AdminAuditEntry.ADDED, obj, {}, self.audit_snapshot(obj))
        return entry

    def log_change(self, request, obj, message):
        entry = super().log_change(request, obj, message)
        before = getattr(obj, "_audit_before", {})
        record_change(request.user, AdminAuditEntry.CHANGED, obj, before, self.audit_snapshot(obj))
        return entry

    def delete_model(self, request, obj) -> None:
        with transaction.atomic():
            pk, before = obj.pk, self.audit_snapshot(obj)
            super().delete_model(request, obj)  # clears obj.pk
            record_change(request.user, AdminAuditEntry.DELETED, obj, before, {}, pk=pk)

    def delete_queryset(self, request, queryset) -> None:
        with transaction.atomic():
            gone = [(obj, obj.pk, self.audit_snapshot(obj)) for obj in queryset]
            super().delete_queryset(request, queryset)
            for obj, pk, before in gone:
                record_change(request.user, AdminAuditEntry.DELETED, obj, before, {}, pk=pk)


class TenantScopeInline(admin.StackedInline):
    model = TenantScope
    can_delete = False
    verbose_name_plural = "tenant scope (no scope: the console shows no tenant's jobs)"
    fields = ("all_tenants", "tenants")


@admin.register(TenantScope)
class TenantScopeAdmin(AuditedAdmin):
    list_display = ("user", "all_tenants", "tenants")
    list_select_related = ("user",)
    fields = ("user", "all_tenants", "tenants")
    search_fields = ("user__username",)


admin.site.unregister(User)
admin.site.unregister(Group)


@admin.register(User)
class AuditedUserAdmin(AuditedAdmin, UserAdmin):
    inlines = [TenantScopeInline]

    def audit_snapshot(self, obj) -> dict:
        scope = TenantScope.objects.filter(user_id=obj.pk).first() if obj.pk else None
        return {**snapshot(obj), "tenant_scope": scope.describe() if scope else None}

    def user_change_password(self, request, id, form_url=""):
        # The new password and its trail entry are written together, or neither is.
        with transaction.atomic():
            return super().user_change_password(request, id, form_url)


@admin.register(Group)
class AuditedGroupAdmin(AuditedAdmin, GroupAdmin):
    def audit_snapshot(self, obj) -> dict:
        # Deleting a group silently removes it from its members: the trail keeps who they were.
        members = sorted(obj.user_set.values_list("username", flat=True)) if obj.pk else []
        return {**snapshot(obj), "members": members}


# -- django-axes: login attempts. Deleting one lifts its lock-out (on the trail); the logs of
# logins and failures are a record, read-only.


admin.site.unregister(AccessAttempt)


@admin.register(AccessAttempt)
class AuditedAccessAttemptAdmin(AuditedAdmin, AccessAttemptAdmin):
    actions = ()  # delete_selected (audited) only: expired attempts are cleaned up by axes itself

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def audit_snapshot(self, obj) -> dict:
        # Who was locked out from where, and how far they had got: not the form data they posted.
        return {
            "username": obj.username,
            "ip_address": obj.ip_address,
            "failures_since_start": obj.failures_since_start,
            "attempt_time": snapshot(obj)["attempt_time"],
        }


_read_only(AccessLog, AccessLogAdmin)
_read_only(AccessFailureLog, AccessFailureLogAdmin)
