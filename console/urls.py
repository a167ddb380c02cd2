from django.urls import path

from console.views import approvals, audit, jobs, overview, queue

urlpatterns = [
    path("", overview.overview, name="overview"),
    path("healthz", overview.healthz, name="healthz"),
    path("queue/", queue.queue, name="queue"),
    path("queue/counts/", queue.queue_counts, name="queue_counts"),
    path("queue/bulk/", queue.bulk_decide, name="queue_bulk"),
    # decide/ first: a job id may itself contain slashes.
    path("jobs/<path:job_id>/decide/", jobs.decide, name="job_decide"),
    path("jobs/<path:job_id>/", jobs.job_detail, name="job_detail"),
    path("approvals/", approvals.approvals, name="approvals"),
    path("approvals/<int:request_id>/decide/", approvals.decide, name="approval_decide"),
    path("audit/", audit.audit, name="audit"),
    path("audit/export.csv", audit.audit_export, name="audit_export"),
]
