"""Who may do what in the console, and on which tenants' jobs.

Roles are Django groups, checked on the server for every view. The tenant fence (a user's
`TenantScope`) limits every read and every decision to the user's tenants; a job outside it
answers exactly as a missing job does. Superusers pass every check and see every tenant.
Anonymous users go to the login page (an HTMX request is sent there with a client redirect,
so a half page never shows a login form).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import wraps

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.contrib.auth.views import redirect_to_login
from django.contrib.postgres.expressions import ArraySubquery
from django.core.exceptions import PermissionDenied
from django.db.models import OuterRef, QuerySet
from django.http import HttpRequest, HttpResponse
from django_htmx.http import HttpResponseClientRedirect

from ledger.models import Job

OPERATORS = "operators"
APPROVERS = "approvers"
AUDITORS = "auditors"
# Everyone who may read the console; only some of them may change anything.
READERS = (OPERATORS, APPROVERS, AUDITORS)


@dataclass(frozen=True)
class TenantFence:
    """The tenants whose jobs a user may see and decide on; `tenants` None means every tenant."""

    tenants: frozenset[str] | None

    @property
    def everything(self) -> bool:
        return self.tenants is None

    @property
    def empty(self) -> bool:
        return self.tenants == frozenset()

    def __str__(self) -> str:
        if self.tenants is None:
            return "all tenants"
        return ", ".join(sorted(self.tenants)) or "no tenants"

    def apply(self, queryset: QuerySet, tenant_field: str = "job__tenant") -> QuerySet:
        """`queryset` limited to rows of the fenced tenants; `tenant_field` leads from a row to
        its job's tenant. Every console read and decision goes through here."""
        if self.tenants is None:
            return queryset
        if not self.tenants:
            return queryset.none()
        return queryset.filter(**{f"{tenant_field}__in": sorted(self.tenants)})

    def jobs(self, queryset: QuerySet[Job] | None = None) -> QuerySet[Job]:
        return self.apply(Job.objects.all() if queryset is None else queryset, "tenant")


EVERY_TENANT = TenantFence(None)
NO_TENANT = TenantFence(frozenset())


def _console_access(user) -> tuple[frozenset[str], TenantFence]:
    """The user's console roles and tenant fence, in one query, cached on the user object for
    the rest of the request (so a scope changed in /admin/ holds from the next request on)."""
    cached = getattr(user, "_reckon_access", None)
    if cached is None:
        roles, all_tenants, tenants = (
            get_user_model()
            ._default_manager.filter(pk=user.pk)
            .annotate(
                roles=ArraySubquery(
                    Group.objects.filter(user=OuterRef("pk"), name__in=READERS).values("name")
                )
            )
            .values_list("roles", "tenant_scope__all_tenants", "tenant_scope__tenants")
            .get()
        )
        if user.is_superuser or all_tenants:
            fence = EVERY_TENANT
        else:
            fence = TenantFence(frozenset(tenants or ()))
        cached = user._reckon_access = (frozenset(roles), fence)
    return cached


def roles_of(user) -> frozenset[str]:
    """The user's console roles."""
    if not user.is_authenticated:
        return frozenset()
    return _console_access(user)[0]


def fence_of(user) -> TenantFence:
    """The tenants `user` may see: a superuser every one, a user without a scope none."""
    if not user.is_authenticated:
        return NO_TENANT
    if user.is_superuser:
        return EVERY_TENANT
    return _console_access(user)[1]


def visible_jobs(user) -> QuerySet[Job]:
    return fence_of(user).jobs()


def has_role(user, roles: Iterable[str]) -> bool:
    return user.is_authenticated and (user.is_superuser or bool(roles_of(user) & set(roles)))


def no_role_message() -> str:
    """What a signed-in person without any console role is told (their roles come from an
    administrator, or from their identity provider's groups: sso.roles)."""
    return f"You have no role here; ask {settings.RECKON_NO_ROLE_CONTACT} for one"


def role_required(*roles: str) -> Callable:
    """Let the view run only for a user in one of `roles` (or a superuser); 403 otherwise."""
    if not roles:
        raise ValueError("role_required needs at least one role")

    def decorator(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @wraps(view)
        def guarded(request: HttpRequest, *args, **kwargs) -> HttpResponse:
            if not request.user.is_authenticated:
                login = redirect_to_login(request.get_full_path())
                if getattr(request, "htmx", False):
                    return HttpResponseClientRedirect(login["Location"])
                return login
            if not request.user.is_superuser and not roles_of(request.user):
                raise PermissionDenied(no_role_message())
            if not has_role(request.user, roles):
                raise PermissionDenied(f"this needs the role {' or '.join(roles)}")
            return view(request, *args, **kwargs)

        guarded.required_roles = roles
        return guarded

    return decorator
