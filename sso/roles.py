"""Roles and tenants from the identity provider's groups, applied at every sign-in through it.

The mapping (RECKON_OIDC_GROUP_ROLES, RECKON_OIDC_GROUP_TENANTS) decides the person's console
roles and tenant scope entirely: a role or tenant that no mapped group gives any more is taken
away. Groups that are not console roles (and superuser status) are left as they are."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth.models import Group
from django.db import transaction

from console.access import READERS
from console.models import TenantScope

EVERY_TENANT = "*"


@dataclass(frozen=True)
class Grant:
    roles: frozenset[str]
    all_tenants: bool
    tenants: frozenset[str]


def groups_claim(claims: dict) -> list[str]:
    """The provider's groups: a list of names, or one name; anything else counts as none."""
    value = claims.get(settings.RECKON_OIDC_GROUPS_CLAIM)
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [str(group) for group in value]
    return []


def grant_for(groups: list[str]) -> Grant:
    roles: set[str] = set()
    tenants: set[str] = set()
    for group in groups:
        roles |= settings.RECKON_OIDC_GROUP_ROLES.get(group, frozenset())
        tenants |= settings.RECKON_OIDC_GROUP_TENANTS.get(group, frozenset())
    return Grant(frozenset(roles), EVERY_TENANT in tenants, frozenset(tenants - {EVERY_TENANT}))


@transaction.atomic
def apply_grant(user, grant: Grant) -> None:
    for name in READERS:
        group, _ = Group.objects.get_or_create(name=name)
        if name in grant.roles:
            user.groups.add(group)
        else:
            user.groups.remove(group)
    scope, _ = TenantScope.objects.get_or_create(user=user)
    scope.all_tenants, scope.tenants = grant.all_tenants, sorted(grant.tenants)
    scope.save()
    user.__dict__.pop("_reckon_access", None)  # console.access's per-request cache
