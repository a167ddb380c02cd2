from django.contrib import admin
from django.contrib.auth.views import LoginView, LogoutView
from django.urls import include, path

from api.metrics import metrics

urlpatterns = [
    path("admin/", admin.site.urls),
    # Only logging in and out: accounts are managed in /admin/, so no password reset or change
    # pages (and no mail-based way into an account).
    path("accounts/login/", LoginView.as_view(), name="login"),
    path("accounts/logout/", LogoutView.as_view(), name="logout"),
    path("api/v1/", include("api.urls")),
    path("metrics", metrics, name="metrics"),
    path("", include("console.urls")),
]
