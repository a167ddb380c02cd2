from django.contrib import admin
from django.contrib.auth.views import LoginView, LogoutView
from django.contrib.staticfiles import finders
from django.http import FileResponse, HttpRequest
from django.urls import include, path
from django.views.decorators.http import require_GET

from api.metrics import metrics


@require_GET
def favicon(request: HttpRequest) -> FileResponse:
    """Browsers ask for /favicon.ico on every page: the console's icon, a static file."""
    return FileResponse(open(finders.find("favicon.ico"), "rb"), content_type="image/x-icon",  # noqa: SIM115
                        headers={"Cache-Control": "public, max-age=86400"})


urlpatterns = [
    path("favicon.ico", favicon, name="favicon"),
    path("admin/", admin.site.urls),
    # Only logging in and out: accounts are managed in /admin/, so no password reset or change
    # pages (and no mail-based way into an account).
    path("accounts/login/", LoginView.as_view(), name="login"),
    path("accounts/logout/", LogoutView.as_view(), name="logout"),
    path("api/v1/", include("api.urls")),
    path("metrics", metrics, name="metrics"),
    path("", include("console.urls")),
]
