from allauth.socialaccount import views as social_views
from allauth.socialaccount.providers.openid_connect import views as oidc_views
from django.contrib import admin
from django.contrib.auth.views import LogoutView
from django.contrib.staticfiles import finders
from django.http import FileResponse, HttpRequest
from django.urls import include, path
from django.views.decorators.http import require_GET

from api.metrics import metrics
from config import unavailable
from sso.views import SignInView, break_glass_code, provider_login


@require_GET
def favicon(request: HttpRequest) -> FileResponse:
    """Browsers ask for /favicon.ico on every page: the console's icon, a static file."""
    return FileResponse(open(finders.find("favicon.ico"), "rb"), content_type="image/x-icon",  # noqa: SIM115
                        headers={"Cache-Control": "public, max-age=86400"})


urlpatterns = [
    path("favicon.ico", favicon, name="favicon"),
    path("admin/", admin.site.urls),
    # Only signing in and out: accounts are managed in /admin/ or come from an identity provider,
    # so no sign-up, password reset or change pages (and no mail-based way into an account).
    path("accounts/login/", SignInView.as_view(), name="login"),
    path("accounts/login/code/", break_glass_code, name="break_glass_code"),
    path("accounts/logout/", LogoutView.as_view(), name="logout"),
    # Sign-in through an identity provider (django-allauth's OpenID Connect views; sso/).
    path("accounts/oidc/<str:provider_id>/login/", provider_login, name="openid_connect_login"),
    path("accounts/oidc/<str:provider_id>/login/callback/", oidc_views.callback, name="openid_connect_callback"),
    path("accounts/provider/cancelled/", social_views.login_cancelled, name="socialaccount_login_cancelled"),
    path("accounts/provider/error/", social_views.login_error, name="socialaccount_login_error"),
    # allauth's names for the sign-in page, where its flows send a person back.
    path("accounts/login/", SignInView.as_view(), name="account_login"),
    path("api/v1/", include("api.urls")),
    path("metrics", metrics, name="metrics"),
    path("", include("console.urls")),
]

# An outage of the database answers 503 with Retry-After, not 500 (config/unavailable.py).
handler500 = unavailable.server_error
