from django.contrib import admin
from django.urls import include, path

from api.metrics import metrics

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("api/v1/", include("api.urls")),
    path("metrics", metrics, name="metrics"),
    path("", include("console.urls")),
]
