from django.urls import path, re_path

from api import views

app_name = "api"

# Job ids containing "/" cannot be addressed here; the API refuses to enqueue them.
urlpatterns = [
    path("jobs", views.jobs, name="jobs"),
    path("jobs/<str:job_id>", views.job_detail, name="job"),
    path("jobs/<str:job_id>/claim", views.claim, name="claim"),
    path("jobs/<str:job_id>/lease/renew", views.renew, name="renew"),
    path("jobs/<str:job_id>/lease/identity", views.identity, name="identity"),
    path("jobs/<str:job_id>/lease/begin", views.begin, name="begin"),
    path("jobs/<str:job_id>/lease/success", views.success, name="success"),
    path("jobs/<str:job_id>/lease/failure", views.failure, name="failure"),
    path("jobs/<str:job_id>/lease/unknown", views.unknown, name="unknown"),
    path("openapi.json", views.openapi, name="openapi"),
    re_path(r"^(?P<rest>[\s\S]*)$", views.not_found),
]
