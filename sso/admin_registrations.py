"""/admin/ for the sign-in models, installed by SsoConfig.ready(): after the admin's autodiscovery,
so that django-allauth's own registrations (made then) are replaced."""

# -- Sign-in (sso/, django-allauth): which provider subjects are linked to which accounts, and the
# sign-in trail, read-only. Provider apps come from the settings, e-mail addresses and tokens are
# not kept, and a TOTP authenticator holds a secret: none of them is shown here
# (`manage.py break_glass_totp` replaces an authenticator).
from allauth.account.models import EmailAddress
from allauth.mfa.models import Authenticator
from allauth.socialaccount.admin import SocialAccountAdmin
from allauth.socialaccount.models import SocialAccount, SocialApp, SocialToken
from django.contrib import admin

from approvals.models import AccountLink, FormerUsername
from console.admin import ReadOnlyAdmin, _read_only
from console.models import SignInEvent

for _model in (EmailAddress, SocialApp, SocialToken, Authenticator):
    if admin.site.is_registered(_model):
        admin.site.unregister(_model)
_read_only(SocialAccount, SocialAccountAdmin)


@admin.register(SignInEvent)
class SignInEventAdmin(ReadOnlyAdmin):
    list_display = ("id", "at", "kind", "username", "method", "subject", "address")
    list_filter = ("kind", "method")
    search_fields = ("=username", "=subject")


# Linked with `manage.py link_accounts` (sso.accounts, on the admin trail); shown here, not edited.
@admin.register(AccountLink)
class AccountLinkAdmin(ReadOnlyAdmin):
    list_display = ("person", "user", "linked_by", "linked_at")
    search_fields = ("=user__username",)


@admin.register(FormerUsername)
class FormerUsernameAdmin(ReadOnlyAdmin):
    list_display = ("user", "username", "until")
    search_fields = ("=username", "=user__username")
