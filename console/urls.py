from django.urls import path, register_converter
from django.views.decorators.cache import cache_control

from console.job_ids import JobIdConverter
from console.views import (
    alerts,
    approvals,
    audit,
    bulk_runs,
    comments,
    holds,
    jobs,
    overview,
    queue,
    search,
    shift,
)

register_converter(JobIdConverter, "job_id")

urlpatterns = [
    path("", overview.overview, name="overview"),
    path("healthz", overview.healthz, name="healthz"),
    path("search/", search.search, name="search"),
    path("overview/charts/", overview.charts, name="overview_charts"),
    path("queue/", queue.queue, name="queue"),
    path("queue/counts/", queue.queue_counts, name="queue_counts"),
    path("queue/bulk/", queue.bulk_decide, name="queue_bulk"),
    path("queue/bulk-runs/<int:run_id>/", bulk_runs.bulk_run, name="bulk_run"),
    path("queue/bulk-runs/<int:run_id>/step/", bulk_runs.bulk_run_step, name="bulk_run_step"),
    # decide/, hold/ and comment/ first: a job id may itself contain slashes.
    path("jobs/<job_id:job_id>/decide/", jobs.decide, name="job_decide"),
    path("jobs/<job_id:job_id>/hold/", holds.hold, name="job_hold"),
    path("jobs/<job_id:job_id>/comment/", comments.comment, name="job_comment"),
    path("jobs/<job_id:job_id>/", jobs.job_detail, name="job_detail"),
    path("approvals/", approvals.approvals, name="approvals"),
    path("approvals/bulk/", approvals.bulk_decide, name="approvals_bulk"),
    path("approvals/<int:request_id>/decide/", approvals.decide, name="approval_decide"),
    path("alerts/", alerts.alerts, name="alerts"),
    path("alerts/<slug:condition>/act/", alerts.act, name="alert_act"),
    path("shift/", shift.shift, name="shift"),
    path("audit/", audit.audit, name="audit"),
    path("audit/export.csv", audit.audit_export, name="audit_export"),
    path("audit/admin-export.csv", audit.admin_audit_export, name="admin_audit_export"),
]

# Console pages and exports carry other tenants' and people's data: no shared or disk cache
# (a proxy, the browser's back-forward cache on a shared machine) may keep a copy.
_private = cache_control(private=True, no_store=True)
for _pattern in urlpatterns:
    _pattern.callback = _private(_pattern.callback)
