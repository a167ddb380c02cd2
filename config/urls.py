from django.contrib import admin
from django.urls import include, path

from api.metrics import metrics
from config.hardening import ThrottledLoginView

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/login/", ThrottledLoginView.as_view(), name="login"),
    path("accounts/", include("django.contrib.auth.urls")),
    path("api/v1/", include("api.urls")),
    path("metrics", metrics, name="metrics"),
    path("", include("console.urls")),
]
