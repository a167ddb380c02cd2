"""Who may do what in the console: roles are Django groups, checked on the server for every view.

Superusers pass every check. Anonymous users go to the login page (an HTMX request is sent
there with a client redirect, so a half page never shows a login form).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import wraps

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django_htmx.http import HttpResponseClientRedirect

OPERATORS = "operators"
APPROVERS = "approvers"
AUDITORS = "auditors"
# Everyone who may read the console; only some of them may change anything.
READERS = (OPERATORS, APPROVERS, AUDITORS)


def roles_of(user) -> frozenset[str]:
    """The user's console roles, cached on the user object for the rest of the request."""
    if not user.is_authenticated:
        return frozenset()
    cached = getattr(user, "_reckon_roles", None)
    if cached is None:
        cached = frozenset(user.groups.filter(name__in=READERS).values_list("name", flat=True))
        user._reckon_roles = cached
    return cached


def has_role(user, roles: Iterable[str]) -> bool:
    return user.is_authenticated and (user.is_superuser or bool(roles_of(user) & set(roles)))


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
            if not has_role(request.user, roles):
                raise PermissionDenied(f"this needs the role {' or '.join(roles)}")
            return view(request, *args, **kwargs)

        guarded.required_roles = roles
        return guarded

    return decorator
